"""Django's PostgreSQL backend with Quotaweb's pool check (see base.py)."""

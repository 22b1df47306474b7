"""The dashboard: server-rendered pages built on the services layer, with figures built by
pure functions (figures.py) and kept live by one small script (static/quotaweb/live.js)."""

"""One router per resource of docs/api.md."""

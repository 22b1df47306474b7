"""One router per resource of API.md."""

"""The API's request and response bodies as pydantic models, so that /api/v1/openapi.json
describes every one of them."""

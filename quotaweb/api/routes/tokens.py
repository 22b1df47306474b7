"""The signed-in user's own API tokens: list, create (the raw token is shown once; only
with the session, never with a bearer token), revoke one, revoke all."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from ninja import Path, Router
from ninja.responses import Status

from ...models import ApiToken
from ...services import tokens as token_services
from ...services.errors import NotFound
from ..auth import NoBearerToken, SessionWithCsrf, current_user
from ..errors import READ_ERRORS, WRITE_ERRORS, error_responses
from ..schemas.activity import NewTokenOut, RevokedOut, TokenIn, TokenListOut
from ..schemas.common import MAX_ID

router = Router(tags=["tokens"])

TokenId = Annotated[int, Path(ge=1, le=MAX_ID)]


def token_dict(token: ApiToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "prefix": token.prefix,
            "created_at": token.created_at, "last_used_at": token.last_used_at,
            "revoked_at": token.revoked_at, "expires_at": token.expires_at}


@router.get("/tokens", response={200: TokenListOut, **error_responses(READ_ERRORS)},
            operation_id="list_tokens", summary="Your API tokens")
def list_tokens(request: HttpRequest) -> dict[str, Any]:
    tokens = ApiToken.objects.filter(user=current_user(request)).order_by("-id")
    return {"tokens": [token_dict(token) for token in tokens]}


SESSION_ONLY = [
    NoBearerToken("Tokens are created while signed in (the dashboard's Tokens page, or this "
                  "API with the session), in the admin or with manage.py create_token; a "
                  "bearer token cannot create tokens."),
    SessionWithCsrf(csrf=True),
]


@router.post("/tokens", response={201: NewTokenOut, **error_responses(WRITE_ERRORS)},
             auth=SESSION_ONLY, operation_id="create_token", summary="Create an API token")
def create_token(request: HttpRequest, payload: TokenIn) -> Status:
    """Only with the browser's session: a bearer token cannot create tokens (403).  The
    answer holds the raw token: it is shown this once and never stored."""
    token, raw = token_services.create_token(current_user(request), name=payload.name,
                                             expires_at=payload.expires_at)
    return Status(201, {**token_dict(token), "token": raw})


@router.post("/tokens/revoke-all", response={200: RevokedOut, **error_responses(WRITE_ERRORS)},
             operation_id="revoke_all_tokens", summary="Revoke all of your API tokens")
def revoke_all_tokens(request: HttpRequest) -> dict[str, int]:
    """Every token of yours that is not revoked yet, the one making this request
    included."""
    return {"revoked": token_services.revoke_all(current_user(request))}


@router.delete("/tokens/{token_id}", response={204: None, **error_responses(WRITE_ERRORS)},
               operation_id="revoke_token", summary="Revoke one of your API tokens")
def revoke_token(request: HttpRequest, token_id: TokenId) -> HttpResponse:
    """Another user's token is a 404, as if it did not exist."""
    token = ApiToken.objects.filter(pk=token_id, user=current_user(request)).first()
    if token is None:
        raise NotFound(f"Token {token_id} does not exist.", code="TOKEN_NOT_FOUND")
    token_services.revoke(ApiToken.objects.filter(pk=token.pk))
    return HttpResponse(status=204)

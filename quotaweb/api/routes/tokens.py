"""The signed-in user's own API tokens: list, create (the raw token is shown once),
revoke."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Path, Router
from ninja.responses import Status

from ...models import ApiToken
from ...services import values
from ...services.errors import NotFound, Problems, ValidationFailed
from ..auth import current_user
from ..errors import READ_ERRORS, WRITE_ERRORS, error_responses
from ..schemas.activity import NewTokenOut, TokenIn, TokenListOut
from ..schemas.common import MAX_ID

router = Router(tags=["tokens"])

TokenId = Annotated[int, Path(ge=1, le=MAX_ID)]


def token_dict(token: ApiToken) -> dict[str, Any]:
    return {"id": token.id, "name": token.name, "prefix": token.prefix,
            "created_at": token.created_at, "last_used_at": token.last_used_at,
            "revoked_at": token.revoked_at}


@router.get("/tokens", response={200: TokenListOut, **error_responses(READ_ERRORS)},
            operation_id="list_tokens", summary="Your API tokens")
def list_tokens(request: HttpRequest) -> dict[str, Any]:
    tokens = ApiToken.objects.filter(user=current_user(request)).order_by("-id")
    return {"tokens": [token_dict(token) for token in tokens]}


@router.post("/tokens", response={201: NewTokenOut, **error_responses(WRITE_ERRORS)},
             operation_id="create_token", summary="Create an API token")
def create_token(request: HttpRequest, payload: TokenIn) -> Status:
    """The answer holds the raw token: it is shown this once and never stored."""
    problems = Problems()
    name = values.text(problems, "name", payload.name, max_length=128)
    if problems or name is None:
        raise ValidationFailed(problems.fields)
    token, raw = ApiToken.issue(current_user(request), name=name)
    return Status(201, {**token_dict(token), "token": raw})


@router.delete("/tokens/{token_id}", response={204: None, **error_responses(WRITE_ERRORS)},
               operation_id="revoke_token", summary="Revoke one of your API tokens")
def revoke_token(request: HttpRequest, token_id: TokenId) -> HttpResponse:
    """Another user's token is a 404, as if it did not exist."""
    token = ApiToken.objects.filter(pk=token_id, user=current_user(request)).first()
    if token is None:
        raise NotFound(f"Token {token_id} does not exist.", code="TOKEN_NOT_FOUND")
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now())
    return HttpResponse(status=204)

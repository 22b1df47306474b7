"""The signed-in user's API tokens (/tokens): list them, create one (its secret shown on
this answer only), revoke one, or revoke all of them at once.  Through services.tokens."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from ...models import ApiToken
from ...services import tokens as token_services
from ...services.errors import ServiceError
from ..forms import NUMBER, show_errors


class TokenForm(forms.Form):
    name = forms.CharField(required=False, max_length=token_services.MAX_NAME,
                           help_text="A label to recognise the token by.")
    expires_in_days = forms.IntegerField(
        required=False, min_value=1, max_value=token_services.MAX_LIFETIME.days,
        widget=NUMBER, label="Expires in (days)", help_text="Empty: never expires.")


def _page(request: HttpRequest, form: TokenForm, new_token: str | None = None,
          status: int = 200) -> HttpResponse:
    tokens = ApiToken.objects.filter(user=request.user).order_by("-id")
    return render(request, "quotaweb/tokens.html", {
        "tokens": tokens, "form": form, "new_token": new_token, "now": timezone.now(),
        "active": sum(1 for token in tokens if token.revoked_at is None)}, status=status)


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request, TokenForm())
    form = TokenForm(request.POST)
    if form.is_valid():
        days = form.cleaned_data["expires_in_days"]
        expires_at = timezone.now() + timedelta(days=days) if days else None
        try:
            _, raw = token_services.create_token(request.user, name=form.cleaned_data["name"],
                                                 expires_at=expires_at)
        except ServiceError as error:
            show_errors(form, error)
        else:
            # Shown on this answer only (never stored, so never in a redirect's message).
            return _page(request, TokenForm(), new_token=raw, status=201)
    return _page(request, form, status=422)


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token_services.revoke(ApiToken.objects.filter(pk=token.pk))
    messages.success(request, f"Token {token.prefix}… revoked.")
    return redirect("web:tokens")


@login_required
@require_POST
def revoke_all_tokens(request: HttpRequest) -> HttpResponse:
    count = token_services.revoke_all(request.user)
    messages.success(request, f"Revoked {count} token{'s' * (count != 1)}: scripts using "
                              "them are refused from now on.")
    return redirect("web:tokens")

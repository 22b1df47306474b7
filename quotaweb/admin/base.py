"""The site, and the two kinds of admin every table uses: saved through the services,
or read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from ..services.errors import ServiceError

admin.site.site_header = "Quotaweb administration"
admin.site.site_title = "Quotaweb"


class ServiceAdmin(admin.ModelAdmin):
    """Turns a service's refusal at save time (another administrator changed the
    configuration after the form was checked) into a message instead of a server error;
    the admin's transaction is rolled back, so nothing is saved."""

    def changeform_view(self, request: HttpRequest, object_id: str | None = None,
                        form_url: str = "", extra_context: dict[str, Any] | None = None
                        ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceError as error:
            self.message_user(request, f"Nothing was saved: {error.message}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # Django's bulk delete would bypass the services; each admin offers its own.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the engine, the executors or the outbox write: viewed, never edited here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def record_formset_changes(formsets: Any) -> None:
    """The admin's change message reads what `formset.save()` would have recorded; the
    services save instead, so record the same lists from the forms."""
    for formset in formsets:
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for form in formset.forms:
            if not form.has_changed() or not form.is_valid():
                continue
            if formset.can_delete and formset._should_delete_form(form):
                if form.instance.pk is not None:
                    formset.deleted_objects.append(form.instance)
            elif form.instance.pk is None:
                formset.new_objects.append(form.instance)
            else:
                formset.changed_objects.append((form.instance, form.changed_data))


def report_outcome(admin_view: admin.ModelAdmin, request: HttpRequest,
            done: int, verb: str, refused: list[str]) -> None:
    if done:
        admin_view.message_user(request, f"{verb} {done}.", messages.SUCCESS)
    for text in refused:
        admin_view.message_user(request, text, messages.ERROR)

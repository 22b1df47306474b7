"""Capacity and quota shares (docs/api.md): everyone signed in reads; administrators change."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from ninja import Path, Router
from ninja.responses import Status

from ...services import configuration
from ...services.errors import Forbidden, NotFound
from ...services.permissions import can_manage_configuration
from ..auth import administrators_only, current_user
from ..errors import READ_ERRORS, WRITE_ERRORS, error_responses
from ..schemas.common import ShareName
from ..schemas.configuration import (
    CapacityIn,
    CapacityOut,
    QuotaShareIn,
    QuotaShareListOut,
    QuotaShareOut,
    QuotaSharePatch,
)
from ..share_representation import capacity_dict, live_share, share_dicts, share_rows

router = Router(tags=["configuration"])

ShareParam = Annotated[ShareName, Path(description="The quota share's name.")]


def _admin_only(request: HttpRequest, what: str) -> None:
    if not can_manage_configuration(current_user(request)):
        raise Forbidden(f"Only administrators may change {what}.")


def _share(name: str) -> Any:
    share = live_share(name)
    if share is None:
        raise NotFound(f"Quota share {name} does not exist.", code="SHARE_NOT_FOUND")
    return share


def _share_out(name: str) -> dict[str, Any]:
    return share_dicts([_share(name)])[0]


@router.get("/capacity", response={200: CapacityOut, **error_responses(READ_ERRORS)},
            operation_id="get_capacity", summary="Read the capacity")
def get_capacity(request: HttpRequest) -> dict[str, Any]:
    return capacity_dict()


@router.put("/capacity", response={200: CapacityOut, **error_responses(WRITE_ERRORS)},
            auth=administrators_only("change the capacity"), operation_id="set_capacity",
            summary="Replace the capacity (administrators)")
def set_capacity(request: HttpRequest, payload: CapacityIn) -> dict[str, Any]:
    """Units left out are removed.  A change that leaves the shares' limits on a unit
    above its max_capacity is refused (422): lower the limits first."""
    _admin_only(request, "the capacity")
    units = payload.model_dump(exclude_unset=True)["capacity_limits"]
    configuration.set_capacity(units)
    return capacity_dict()


@router.get("/quota-shares", response={200: QuotaShareListOut, **error_responses(READ_ERRORS)},
            operation_id="list_quota_shares", summary="List the quota shares")
def list_shares(request: HttpRequest) -> dict[str, Any]:
    return {"quota_shares": share_dicts(list(share_rows()))}


@router.post("/quota-shares", response={201: QuotaShareOut, **error_responses(WRITE_ERRORS)},
             auth=administrators_only("change quota shares"),
             operation_id="create_quota_share",
             summary="Create a quota share (administrators)")
def create_share(request: HttpRequest, payload: QuotaShareIn) -> Status:
    _admin_only(request, "quota shares")
    share = configuration.create_share(**payload.model_dump(exclude_unset=True))
    return Status(201, _share_out(share.name))


@router.get("/quota-shares/{name}", response={200: QuotaShareOut, **error_responses(READ_ERRORS)},
            operation_id="get_quota_share", summary="Read a quota share")
def get_share(request: HttpRequest, name: ShareParam) -> dict[str, Any]:
    return _share_out(name)


@router.patch("/quota-shares/{name}",
              response={200: QuotaShareOut, **error_responses(WRITE_ERRORS)},
              auth=administrators_only("change quota shares"),
              operation_id="update_quota_share",
              summary="Change a quota share (administrators)")
def update_share(request: HttpRequest, name: ShareParam, payload: QuotaSharePatch
                 ) -> dict[str, Any]:
    _admin_only(request, "quota shares")
    configuration.update_share(_share(name), **payload.model_dump(exclude_unset=True))
    return _share_out(name)


@router.delete("/quota-shares/{name}",
               response={204: None, **error_responses(WRITE_ERRORS)},
               auth=administrators_only("change quota shares"),
               operation_id="delete_quota_share",
               summary="Delete a DISABLED quota share (administrators)")
def delete_share(request: HttpRequest, name: ShareParam) -> HttpResponse:
    """409 unless the share is DISABLED.  Its remaining jobs are terminated (FAILED,
    `Quota share deleted`) and its warm pools end; its jobs, events and usage stay
    readable, and its name can be used again."""
    _admin_only(request, "quota shares")
    configuration.delete_share(_share(name))
    return HttpResponse(status=204)

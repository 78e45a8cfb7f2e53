"""The console's routes under ``/ui/``: a static page and small read-only JSON endpoints.

The page holds no data. Its script asks for a bearer token (kept in the tab's ``sessionStorage``),
sends it in the ``Authorization`` header of every ``/ui/api/`` call, and each call resolves the
owner from that header exactly as an MCP request does: no cookie, so no other site can make a
browser send the credential, and no owner is ever taken from the URL.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from pydantic import ValidationError

from cluster.auth import OwnerResolver
from cluster.console import reads
from cluster.core.errors import InvalidInput, NotFound, Unauthorized
from cluster.services import Services

STATIC = Path(__file__).parent / "static"
#: The files the page is made of; nothing else under the package is served.
FILES = {"app.js": "text/javascript", "style.css": "text/css"}
#: The page loads its own script and style only, and talks to this origin only.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def console_routes(services: Services, owners: OwnerResolver) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False)

    async def answer(request: Request, read: Callable[[str], dict[str, Any]]) -> Response:
        try:
            owner = owners.owner_for(request)
            body = await anyio.to_thread.run_sync(read, owner)
        except Unauthorized as exc:
            return _error(401, "unauthorized", str(exc), {"WWW-Authenticate": "Bearer"})
        except NotFound as exc:
            return _error(404, "not_found", str(exc))
        except InvalidInput as exc:
            return _error(400, "invalid_input", str(exc))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            return _error(400, "invalid_input", f"{where}: {first['msg']}")
        return JSONResponse(jsonable_encoder(body), headers={"Cache-Control": "no-store"})

    @router.get("")
    async def bare(request: Request) -> Response:
        return RedirectResponse(request.scope.get("root_path", "") + "/ui/")

    @router.get("/")
    async def page() -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)

    @router.get("/static/{name}")
    async def asset(name: str) -> Response:
        if name not in FILES:
            return _error(404, "not_found", f"no file {name!r}")
        return FileResponse(STATIC / name, media_type=FILES[name], headers=HEADERS)

    @router.get("/api/whoami")
    async def whoami(request: Request) -> Response:
        return await answer(request, lambda owner: {"owner": owner, "development_mode": owners.development_mode})

    @router.get("/api/trajectories")
    async def trajectories(request: Request) -> Response:
        return await answer(request, partial(reads.trajectories, services))

    @router.get("/api/trajectories/{trajectory_id}")
    async def trajectory(request: Request, trajectory_id: str) -> Response:
        return await answer(
            request, lambda owner: reads.trajectory(services, owner, reads.parse_id(trajectory_id, "trajectory_id"))
        )

    @router.get("/api/library")
    async def library(request: Request, version: str | None = None) -> Response:
        return await answer(
            request,
            lambda owner: reads.library(
                services, owner, None if version is None else reads.parse_int(version, "version")
            ),
        )

    @router.get("/api/library/diff")
    async def diff(request: Request, a: str = "", b: str = "") -> Response:
        return await answer(
            request, lambda owner: reads.diff(services, owner, reads.parse_int(a, "a"), reads.parse_int(b, "b"))
        )

    @router.get("/api/templates/{template_id}")
    async def template(request: Request, template_id: str) -> Response:
        return await answer(
            request, lambda owner: reads.template(services, owner, reads.parse_id(template_id, "template_id"))
        )

    @router.get("/api/memories")
    async def memories(request: Request) -> Response:
        return await answer(request, partial(reads.memories, services))

    @router.get("/api/memories/{memory_id}")
    async def memory(request: Request, memory_id: str) -> Response:
        return await answer(
            request, lambda owner: reads.memory(services, owner, reads.parse_id(memory_id, "memory_id"))
        )

    @router.get("/api/memory-search")
    async def memory_search(request: Request, q: str = "", entity: str | None = None) -> Response:
        return await answer(request, lambda owner: reads.search(services, owner, q, entity))

    return router


def _error(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)

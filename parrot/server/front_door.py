"""What the manager's HTTP server serves besides the wire API, registered in one place.

`ParrotServer` passes `front_door(api)` to `http_api.create_app`: each entry adds its routes
(and middlewares) before the wire API's catch-all route.
"""

from __future__ import annotations

from parrot.server.http_api import AppSetup
from parrot.server.metrics import Metrics
from parrot.server.openai_api import OpenAIRoutes
from parrot.server.openapi import OpenAPIRoute
from parrot.server.sse import VariableStreamRoute
from parrot.server.wire_routes import WireAPI


def front_door(api: WireAPI) -> list[AppSetup]:
    """Routes: /metrics (and the access log), the OpenAI API, variable streams,
    /openapi.json."""
    return [Metrics(api.manager, api.route_table, api.access).setup,
            OpenAIRoutes(api.manager, api.admit_session, api.admission,
                         api.require_caller, api.admit_new_work).setup,
            VariableStreamRoute(api.manager).setup, OpenAPIRoute().setup]

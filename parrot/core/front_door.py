"""What the manager's HTTP server serves besides the wire API, registered in one place.

`ParrotServer` passes `front_door(manager)` to `http_api.create_app`: each entry adds its routes
(and middlewares) before the wire API's catch-all route.
"""

from __future__ import annotations

from parrot.core.http_api import AppSetup
from parrot.core.manager import Manager
from parrot.core.openai_api import OpenAIRoutes
from parrot.core.sse import VariableStreamRoute


def front_door(manager: Manager) -> list[AppSetup]:
    return [OpenAIRoutes(manager).setup, VariableStreamRoute(manager).setup]

"""How the gateway reaches its replicas: one small protocol, a real transport and two fakes.

- ``base``: the protocol (``Transport.send``), the request and reply values, the errors
- ``http1``: ``Http1Transport``, the real one (keep-alive HTTP/1.1 on asyncio protocols)
- ``asgi``: ``AsgiTransport``, which calls worker apps in this process (service tests)
- ``mock``: ``MockTransport(handler)``, where a function answers every call (unit tests)
"""

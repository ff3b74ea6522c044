"""The console's HTML: one shell per page, and the sign-in form.

A shell holds no data: ``static/console.js`` polls the page's JSON and draws it, with
DOM text nodes (never ``innerHTML``), so a tenant or model name is always text. The
few values written here (the title, the admin key id, the CSRF token, an error) go
through ``html.escape``. No inline script or style: the Content-Security-Policy
allows only this origin's files.
"""

from __future__ import annotations

from html import escape

PAGES: dict[str, str] = {
    "pools": "Pools & replicas",
    "admission": "Admission",
    "tenants": "Tenants",
    "models": "Models",
    "audit": "Audit",
    "economics": "Economics",
}
"""Each page's path under /console, and its title, in the order of the navigation."""

_CURRENT = ' aria-current="page"'
_HEAD = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    "<title>{title} · headway console</title>{meta}"
    '<link rel="stylesheet" href="/console/static/console.css"></head>'
)


def page_html(page: str, key_id: str, csrf: str) -> bytes:
    """The shell of ``page`` for the session of ``key_id``; ``csrf`` for its writes."""
    links = "".join(
        f'<a href="/console/{name}"{_CURRENT if name == page else ""}>{escape(title)}</a>'
        for name, title in PAGES.items()
    )
    meta = f'<meta name="csrf-token" content="{escape(csrf)}">'
    body = (
        f'<body data-page="{escape(page)}"><header><strong>headway console</strong>'
        f"<nav>{links}</nav>"
        '<form method="post" action="/console/logout" class="signout">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        f'<span class="who">admin key {escape(key_id)}</span>'
        '<button type="submit">Sign out</button></form></header>'
        f"<main><h1>{escape(PAGES[page])}</h1>"
        '<p id="status" class="status">loading…</p><div id="view"></div></main>'
        '<script src="/console/static/console.js"></script></body></html>'
    )
    return (_HEAD.format(title=escape(PAGES[page]), meta=meta) + body).encode()


def login_html(form_token: str, error: str = "") -> bytes:
    """The sign-in form; ``form_token`` pairs it with its login cookie (``session.py``)."""
    shown = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    body = (
        '<body data-page="login"><main class="login"><h1>headway console</h1>'
        f"{shown}"
        '<form method="post" action="/console/login">'
        f'<input type="hidden" name="csrf" value="{escape(form_token)}">'
        '<label for="key">Admin API key</label>'
        '<input id="key" name="key" type="password" autocomplete="current-password" required>'
        '<button type="submit">Sign in</button></form>'
        "<p>Sign in with an admin key; a tenant's key cannot.</p></main></body></html>"
    )
    return (_HEAD.format(title="Sign in", meta="") + body).encode()

"""Who may drive the dashboard: the Host and Origin allow-lists, the dashboard's key, and the
guard that enforces both in front of Streamlit's server.

**ui.guard** sits in front of every request the dashboard's server answers (app.py and pages/ ->
ui -> **ui.guard**; `python -m ui.serve` installs it before the server listens, `import ui`
again when a page is first drawn, so a plain `streamlit run app.py` is guarded too).

Three locks, each for a different attacker (README, "Security"):

- **Host**: a request whose Host is not 127.0.0.1, localhost or [::1] on the dashboard's own
  port (or a name in `AGENTRL_ALLOWED_HOSTS`) gets 403, page or WebSocket. A web page whose own
  name was rebound to 127.0.0.1 (DNS rebinding) sends its own name as Host.
- **Origin**: a WebSocket must say where its page came from, and that must be the dashboard's
  own origin, host *and* port (a page on http://localhost:3000 is another site's page). A client
  that sends no Origin is refused. HTTP responses may not be framed by another origin
  (`frame-ancestors 'self'`), so no other page can show the dashboard and steer the user's clicks.
- **The key**: a per-runs-directory secret in `<runs_dir>/.dashboard-key` (mode 0600, made
  once). A browser gets it only by opening the link `python -m ui.serve` prints
  (`/?key=...`): the server answers with an HttpOnly, SameSite=Strict cookie and a redirect to
  the same page without the key. Every action that starts a process, deletes, cancels or
  promotes asks `may_act()`, which needs that cookie on the session's WebSocket; a page view
  without it is read-only. A process of another user can forge Host and Origin, but cannot read
  the key.

And one promise: nothing here, nor in Streamlit's server once guarded, looks up an external
address (Streamlit asks a public "checkip" host for its external IP when a WebSocket comes from
a foreign Origin, and opens a socket towards 8.8.8.8 to learn its LAN address).
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
ALLOWED_HOSTS_ENV = "AGENTRL_ALLOWED_HOSTS"  # more names, comma-separated: "myhost,myhost.lan"
SCRIPT_ENGINE_ENV = "AGENTRL_ALLOW_SCRIPT_ENGINE"  # "1": the Launch page may start the script engine
KEY_FILE = ".dashboard-key"
KEY_COOKIE = "agentrl_key"
KEY_PARAM = "key"
COOKIE_MAX_AGE_S = 400 * 24 * 3600  # the longest a browser keeps a cookie
# Sent with every HTTP response: no other origin may frame, embed or read the dashboard.
SECURITY_HEADERS = [
    (b"content-security-policy", b"frame-ancestors 'self'"),
    (b"x-frame-options", b"SAMEORIGIN"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"referrer-policy", b"no-referrer"),
]


# --- Allow-lists (pure) ------------------------------------------------------------------------


def allowed_hosts() -> list[str]:
    extra = [name.strip().lower().strip("[]") for name in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")]
    return [*LOOPBACK_HOSTS, *(name for name in extra if name)]


def _host_and_port(netloc: str, default_port: int) -> tuple[str, int] | None:
    """(hostname, port) of a Host header or an origin's netloc; None when it is not one."""
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.password is not None or parts.path or parts.query:
        return None
    return parts.hostname.lower().rstrip("."), port if port is not None else default_port


def host_allowed(host: str | None, port: int, hosts: list[str] | None = None) -> bool:
    """The Host header names an allowed host and the dashboard's own port."""
    found = _host_and_port(host or "", 80)
    return found is not None and found[0] in (hosts or allowed_hosts()) and found[1] == port


def origin_allowed(origin: str | None, port: int, hosts: list[str] | None = None) -> bool:
    """The Origin is the dashboard's own: http(s), an allowed host, the dashboard's port. No
    Origin (a process that is not a browser page) and 'null' (a sandboxed frame) are refused."""
    if not origin:
        return False
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/"):
        return False
    found = _host_and_port(parts.netloc, 443 if parts.scheme == "https" else 80)
    return found is not None and found[0] in (hosts or allowed_hosts()) and found[1] == port


def refusal(host: str | None, origin: str | None, port: int, websocket: bool) -> str | None:
    """Why a request is refused (one line), or None when it may go on."""
    if not host_allowed(host, port):
        names = ", ".join(f"[{h}]" if ":" in h else h for h in allowed_hosts())
        return (f"Refused: this dashboard answers only to {names} on port {port}, not to Host {host!r} "
                f"(add a name with {ALLOWED_HOSTS_ENV}).")
    if websocket and not origin_allowed(origin, port):
        return f"Refused: a connection from origin {origin!r} is not the dashboard's own page."
    if not websocket and origin is not None and not origin_allowed(origin, port):
        return f"Refused: a request from origin {origin!r} is not the dashboard's own page."
    return None


def script_engine_allowed() -> bool:
    """Whether the person who started the dashboard let its Launch page run commands."""
    return os.environ.get(SCRIPT_ENGINE_ENV, "").strip().lower() in ("1", "true", "yes")


# --- The key -----------------------------------------------------------------------------------


def key_path(runs_dir: Path) -> Path:
    return Path(runs_dir) / KEY_FILE


def load_key(runs_dir: Path) -> str:
    """The dashboard's key for `runs_dir`, made on first use (0600: only its owner reads it). A
    file that others could read is narrowed to 0600 first."""
    path = key_path(runs_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        key = path.read_text().strip()
        if len(key) < 32:
            raise ValueError(f"{path} does not hold a dashboard key; delete it and a new one is made") from None
        return key
    key = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return key


def key_matches(given: str | None, key: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), key.encode())


def link(runs_dir: Path, port: int, host: str = "127.0.0.1") -> str:
    """The link that hands a browser the key (printed by `python -m ui.serve`)."""
    return f"http://{host}:{port}/?{KEY_PARAM}={load_key(runs_dir)}"


# --- The guard in front of Streamlit's server ----------------------------------------------


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _server_port() -> int:
    from streamlit import config

    return int(config.get_option("server.port"))


def _runs_dir() -> Path:
    from agentrl.record.rundir import default_runs_dir

    return default_runs_dir().resolve()


async def _respond(send, status: int, body: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = body.encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(data)).encode()),
        (b"cache-control", b"no-store"), *SECURITY_HEADERS, *headers]})
    await send({"type": "http.response.body", "body": data})


async def guarded(app, scope, receive, send) -> None:
    """The guard around one ASGI call of Streamlit's app (`app`)."""
    if scope["type"] not in ("http", "websocket"):
        await app(scope, receive, send)
        return
    port = _server_port()
    websocket = scope["type"] == "websocket"
    reason = refusal(_header(scope, b"host"), _header(scope, b"origin"), port, websocket)
    if reason is not None:
        if websocket:  # closing before accepting: the handshake is answered 403
            await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
        else:
            await _respond(send, 403, reason + "\n")
        return
    if websocket:
        await app(scope, receive, send)
        return
    query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    given = [value for name, value in query if name == KEY_PARAM]
    if given and scope.get("method") == "GET":
        try:
            key = load_key(_runs_dir())
        except (OSError, ValueError) as error:  # an unwritable runs directory: the page says more
            await _respond(send, 403, f"Refused: the dashboard's key cannot be read: {error}\n")
            return
        if not key_matches(given[0], key):
            await _respond(send, 403, "Refused: this is not the dashboard's key (see <runs dir>/.dashboard-key).\n")
            return
        rest = urlencode([(name, value) for name, value in query if name != KEY_PARAM])
        cookie = (f"{KEY_COOKIE}={given[0]}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; SameSite=Strict").encode()
        # The same page without the key; a path of "//host" would make the redirect leave the dashboard.
        location = (scope.get("root_path", "") + "/" + quote(scope["path"].lstrip("/")) + (f"?{rest}" if rest else "")).encode()
        await _respond(send, 303, "The key is set; this browser can act on this dashboard.\n",
                       [(b"location", location), (b"set-cookie", cookie)])
        return

    async def send_with_headers(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
        await send(message)

    await app(scope, receive, send_with_headers)


def session_refusal(headers, cookies) -> str | None:
    """Why the browser session whose WebSocket handshake sent `headers` may not see the
    dashboard (the same check as the guard's, for a session that connected before the guard
    was installed); None when it may."""
    return refusal(headers.get("host"), headers.get("origin"), _server_port(), websocket=True)


def session_holds_key(cookies) -> bool:
    return key_matches(cookies.get(KEY_COOKIE), load_key(_runs_dir()))


_installed = False


def install() -> None:
    """Put the guard in front of Streamlit's server, and turn off its external-address lookups.
    Idempotent; takes effect for every later request, also on a server already running (the
    guard wraps the first middleware of Streamlit's app at its class)."""
    global _installed
    if _installed:
        return
    from streamlit import net_util
    from streamlit.web.server.starlette import starlette_path_security_middleware as path_security
    from streamlit.web.server.starlette import starlette_websocket

    # No "External URL" lookup (checkip.amazonaws.com) and no socket towards 8.8.8.8, for any caller.
    net_util.get_external_ip = lambda: None
    net_util.get_internal_ip = lambda: None
    # Streamlit's own WebSocket checks, behind the guard: the same rules (its Host list is the
    # config's, which knows no AGENTRL_ALLOWED_HOSTS name, and its Origin check ignores ports).
    starlette_websocket.is_host_allowed = lambda host: (_host_and_port(host or "", 80) or ("",))[0] in allowed_hosts()
    starlette_websocket._is_origin_allowed = lambda origin, host: refusal(host, origin, _server_port(), True) is None

    middleware = path_security.PathSecurityMiddleware
    unguarded = middleware.__call__

    async def call(self, scope, receive, send) -> None:
        await guarded(lambda s, r, w: unguarded(self, s, r, w), scope, receive, send)

    middleware.__call__ = call
    _installed = True

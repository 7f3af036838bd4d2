"""Only the user drives the dashboard, and nothing leaves the machine (issue 22, items 1 and 2):
the real dashboard (`python -m ui.serve`, as `make run` starts it), raw HTTP and WebSocket
handshakes, and headless Chromium as the attacker's and the user's browser.

Every socket the server opens is recorded twice: an audit hook (Python's `sys.addaudithook`,
installed by a sitecustomize on the server's PYTHONPATH) logs each name lookup and each connect
or send to an address that is not loopback, and psutil samples the server's connections while
the test runs. Chromium records every request a tab makes. TEST-NET addresses (203.0.113.x)
appear only inside text that must not be fetched; nothing is ever sent off this machine.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from browsing import CHROMIUM, CHROMIUM_ARGS, TEST_KEY, running_dashboard, wait_idle
from conftest import add_run

pytestmark = pytest.mark.browser

HOSTILE = ("![x](http://203.0.113.7/x.png) [link](http://203.0.113.7/l) <img src=http://203.0.113.7/y.png> "
           "<a href=http://203.0.113.7/a>a</a> :material/home:")
# Elements that would fetch or link to the text's addresses: any URL-bearing attribute (SVG's
# xlink:href too, as plotly draws links in chart text) or a CSS url().
LINKS_TO_TEST_NET = """() => [...document.querySelectorAll('*')].filter(e => [...e.attributes].some(a =>
    ['src', 'href', 'srcset', 'poster', 'data', 'action', 'formaction', 'background'].includes(a.localName)
    && a.value.includes('203.0.113')) || (e.getAttribute('style') || '').includes('203.0.113')).map(e => e.outerHTML.slice(0, 200))"""

AUDIT_HOOK = '''
import ipaddress, os, sys

_LOG = os.environ["AGENTRL_TEST_SOCKET_LOG"]


def _loopback(host):
    if not isinstance(host, str) or host in ("", "localhost"):
        return True  # a bind to every address, a unix socket path
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False  # a name: looking it up may ask a DNS server
    return address.is_loopback or address.is_unspecified


def _hook(event, args):
    if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"):
        host = args[0].decode() if isinstance(args[0], bytes) else args[0]
    elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        address = args[1] if len(args) > 1 else None
        host = address[0] if isinstance(address, tuple) and address else None
    else:
        return
    if not _loopback(host):
        with open(_LOG, "a") as log:
            log.write(f"{os.getpid()} {event} {host!r}\\n")


sys.addaudithook(_hook)
'''


class Sockets:
    """The server's sockets: the audit log's lines and psutil's samples of its connections."""

    def __init__(self, tmp_path: Path):
        self.hook_dir = tmp_path / "audit"
        self.hook_dir.mkdir()
        (self.hook_dir / "sitecustomize.py").write_text(AUDIT_HOOK)
        self.log = tmp_path / "sockets.log"
        self.log.touch()
        self.remote: list[str] = []
        self._stop = threading.Event()

    def env(self) -> dict:
        return {"PYTHONPATH": str(self.hook_dir), "AGENTRL_TEST_SOCKET_LOG": str(self.log)}

    @contextlib.contextmanager
    def sampling(self, port: int):
        import psutil

        (server,) = [c for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port
                     and c.status == psutil.CONN_LISTEN]
        process = psutil.Process(server.pid)

        def sample() -> None:
            while not self._stop.is_set():
                with contextlib.suppress(psutil.Error):
                    for c in process.net_connections(kind="inet"):
                        if c.raddr and not _is_loopback(c.raddr.ip):
                            self.remote.append(f"{c.raddr.ip}:{c.raddr.port}")
                time.sleep(0.1)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()

    def off_machine(self) -> list[str]:
        return self.log.read_text().splitlines() + self.remote


def _is_loopback(ip: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(ip.split("%")[0]).is_loopback


def _request(port: int, lines: list[str]) -> tuple[int, str]:
    """A raw HTTP/1.1 request to the dashboard: (status, head of the response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    text = head.decode("latin-1")
    return int(text.split(" ", 2)[1]), text


def _websocket(port: int, host: str | None = None, origin: str | None = None) -> int:
    """The status of a WebSocket handshake on Streamlit's stream: 101 when it is accepted."""
    lines = ["GET /_stcore/stream HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
             "Sec-WebSocket-Protocol: streamlit"]
    if origin:
        lines.append(f"Origin: {origin}")
    return _request(port, lines)[0]


def _page(port: int, path: str = "/", host: str | None = None) -> tuple[int, str]:
    return _request(port, [f"GET {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Connection: close"])


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """One dashboard for the handshake tests, its sockets recorded: (port, runs_dir, sockets)."""
    tmp_path = tmp_path_factory.mktemp("guarded")
    sockets = Sockets(tmp_path)
    runs_dir = tmp_path / "runs"
    with running_dashboard(tmp_path, runs_dir, env=sockets.env()) as base_url:
        port = urlsplit(base_url).port
        with sockets.sampling(port):
            yield port, runs_dir, sockets


def _runs(runs_dir: Path) -> list[str]:
    return sorted(p.name for p in runs_dir.iterdir() if p.is_dir())


# --- Host and Origin ----------------------------------------------------------------------------


def test_a_rebound_name_gets_403_for_pages_and_the_websocket(guarded):
    port, _, _ = guarded
    assert _page(port)[0] == 200 and _websocket(port, origin=f"http://127.0.0.1:{port}") == 101
    for path in ("/", "/Launch", "/_stcore/health", "/static/js/index.js"):
        status, head = _page(port, path, host=f"evil.test:{port}")
        assert status == 403, (path, head)
    assert _websocket(port, host=f"evil.test:{port}", origin=f"http://evil.test:{port}") == 403
    assert _page(port, host="localhost:3000")[0] == 403  # the right name on another port


def test_a_websocket_from_another_port_or_without_an_origin_is_refused(guarded):
    port, _, _ = guarded
    assert _websocket(port, origin="http://localhost:3000") == 403
    assert _websocket(port, origin="http://127.0.0.1:3000") == 403
    assert _websocket(port, origin=None) == 403  # a local process that is not a browser page
    assert _websocket(port, origin=f"http://localhost:{port}", host=f"localhost:{port}") == 101


def test_a_foreign_origin_makes_the_server_look_nothing_up(guarded):
    """Streamlit looked up its external IP (checkip.amazonaws.com) on each such handshake."""
    port, _, sockets = guarded
    assert _websocket(port, origin="http://evil.example") == 403
    assert _websocket(port, origin="http://evil.example", host=f"localhost:{port}") == 403
    time.sleep(1.5)  # the lookup had a 1 s timeout
    assert sockets.off_machine() == []


def test_no_other_origin_may_frame_or_embed_the_dashboard(guarded):
    port, _, _ = guarded
    status, head = _page(port, "/Launch")
    assert status == 200
    assert "content-security-policy: frame-ancestors 'self'" in head.lower()
    assert "x-frame-options: sameorigin" in head.lower() and "cross-origin-resource-policy: same-origin" in head.lower()


def test_the_printed_link_gives_the_key_as_a_strict_httponly_cookie(guarded):
    port, _, _ = guarded
    status, head = _page(port, f"/Launch?key={TEST_KEY}&run=a")
    assert status == 303
    assert "location: /Launch?run=a\r\n" in head  # the key leaves the address bar at once
    (cookie,) = [line for line in head.split("\r\n") if line.lower().startswith("set-cookie:")]
    assert f"agentrl_key={TEST_KEY}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert _page(port, "/?key=not-the-key")[0] == 403


def test_a_plain_streamlit_run_is_guarded_from_its_first_page_view(tmp_path, browser):
    """`streamlit run app.py` without ui.serve (as tools that start the app do): the config's Host
    list refuses a rebound WebSocket from the start; the first page drawn installs the guard."""
    runs_dir = tmp_path / "runs"
    with running_dashboard(tmp_path, runs_dir, plain_streamlit=True) as base_url:
        port = urlsplit(base_url).port
        assert _websocket(port, host=f"evil.test:{port}", origin=f"http://evil.test:{port}") == 403
        tab = browser.new_page()
        tab.goto(base_url)
        tab.get_by_text("Runs directory").wait_for(timeout=60_000)  # drawn by the page: ui was imported
        assert _page(port, host=f"evil.test:{port}")[0] == 403
        assert _websocket(port, origin="http://localhost:3000") == 403 and _websocket(port, origin=None) == 403
        assert _websocket(port, origin=f"http://127.0.0.1:{port}") == 101


# --- Browsers ------------------------------------------------------------------------------------

ATTACK_PAGE = """<!doctype html><html><body>
<iframe id="frame" src="{app}/Launch" width="1200" height="1400"></iframe>
<script>
window.wsOpened = false; window.wsClosed = false; window.fetched = "pending";
const ws = new WebSocket("{ws}/_stcore/stream", ["streamlit"]);
ws.onopen = () => {{ window.wsOpened = true; }};
ws.onclose = () => {{ window.wsClosed = true; }};
fetch("{app}/", {{mode: "no-cors"}}).then(() => {{ window.fetched = "sent"; }}, () => {{ window.fetched = "refused"; }});
</script></body></html>"""


@contextlib.contextmanager
def _attacker_site(html: str):
    """A page served from another origin: http.server on another 127.0.0.1 port."""
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _try_to_start_a_run(frame_or_page, seconds: float) -> bool:
    """What the attacker's script would do: wait for Start run and click it. True if it could."""
    from playwright.sync_api import Error as PlaywrightError

    button = frame_or_page.get_by_role("button", name="Start run")
    try:
        button.wait_for(timeout=seconds * 1000)
        button.click(timeout=5_000)
    except PlaywrightError:
        return False
    return True


def test_a_page_on_another_origin_can_neither_load_the_app_nor_start_a_run(dashboard, browser):
    """The victim's browser holds the key (cookies are per host, not per port: it would go with
    the frame's requests), and the attacker's page is on another port of 127.0.0.1."""
    base_url, runs_dir = dashboard
    tab = browser.new_page(viewport={"width": 1400, "height": 1600})
    ws_url = base_url.replace("http://", "ws://")
    with _attacker_site(ATTACK_PAGE.format(app=base_url, ws=ws_url)) as site:
        tab.goto(f"{site}/")
        frame = tab.frame_locator("#frame")
        started = _try_to_start_a_run(frame, seconds=15)
        time.sleep(2)
        assert not started, "the framed dashboard could be driven"
        assert tab.evaluate("window.wsOpened") is False and tab.evaluate("window.wsClosed") is True
    assert _runs(runs_dir) == []
    # The user's own tab on the same browser still works: the refusals are the attacker's only.
    own = browser.new_page(viewport={"width": 1400, "height": 1600})
    own.goto(f"{base_url}/Launch")
    own.get_by_role("button", name="Start run").wait_for(timeout=60_000)
    wait_idle(own)
    assert own.get_by_role("button", name="Start run").is_enabled()


def test_a_page_reached_through_a_rebound_name_can_neither_load_nor_start_a_run(dashboard):
    """DNS rebinding: the attacker's name now resolves to 127.0.0.1 (Chromium's resolver rules)."""
    from playwright.sync_api import sync_playwright

    base_url, runs_dir = dashboard
    port = urlsplit(base_url).port
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.test 127.0.0.1"])
        try:
            tab = chromium.new_page()
            response = tab.goto(f"http://evil.test:{port}/Launch")
            assert response.status == 403
            assert "answers only to" in tab.content()
            assert not _try_to_start_a_run(tab, seconds=5)
            opened = tab.evaluate("""url => new Promise(done => {
                const ws = new WebSocket(url, ["streamlit"]);
                ws.onopen = () => done(true); ws.onclose = () => done(false);
            })""", f"ws://evil.test:{port}/_stcore/stream")
            assert opened is False
        finally:
            chromium.close()
    assert _runs(runs_dir) == []


def test_a_browser_without_the_key_sees_the_dashboard_read_only_until_it_opens_the_link(dashboard, browser):
    base_url, runs_dir = dashboard
    context = browser.new_context(viewport={"width": 1400, "height": 1600})  # no key
    try:
        tab = context.new_page()
        tab.goto(f"{base_url}/Launch")
        start = tab.get_by_role("button", name="Start run")
        start.wait_for(timeout=60_000)
        wait_idle(tab)
        assert start.is_disabled()
        assert tab.get_by_text("View only: this browser does not hold the dashboard's key").count() >= 1
        tab.goto(f"{base_url}/Launch?key={TEST_KEY}")  # the link `make run` printed
        assert "key=" not in tab.url
        start.wait_for(timeout=60_000)
        wait_idle(tab)
        assert start.is_enabled()
        start.click()
        tab.get_by_text("Started").wait_for(timeout=60_000)
    finally:
        context.close()
    assert len(_runs(runs_dir)) == 1


def test_the_script_engine_is_off_unless_the_dashboard_was_started_with_it(dashboard, page):
    base_url, runs_dir = dashboard
    page.goto(f"{base_url}/Launch")
    page.get_by_role("combobox", name="Preset").wait_for(timeout=60_000)
    page.get_by_role("combobox", name="Preset").click()
    page.get_by_role("option", name="script-custom-loop").click()
    page.get_by_text("The script engine runs the command typed here, so it is off").wait_for(timeout=60_000)
    # The message can draw before the rerun that drew it has redrawn the button below it.
    wait_idle(page)
    assert page.get_by_role("button", name="Start run").is_disabled()
    assert _runs(runs_dir) == []


# --- Nothing leaves the machine ------------------------------------------------------------------


def _hostile_store(runs_dir: Path) -> str:
    """A finished run whose every user-written text is full of images and links."""
    from agentrl.store import curation
    from agentrl.store.db import connect

    run_id = "hostile-run"
    add_run(runs_dir, run_id, "trl", status="failed")
    con = connect(runs_dir)
    try:
        con.execute("UPDATE runs SET name = ?, error = ? WHERE run_id = ?", [f"name {HOSTILE}", f"error {HOSTILE}", run_id])
        con.execute("UPDATE trajectories SET task_id = ?, verifier_reason = ? WHERE run_id = ?",
                    [f"task {HOSTILE}", f"reason {HOSTILE}", run_id])
        curation.annotate(con.cursor(), run_id, tags=[f"tag {HOSTILE}"], note=f"note {HOSTILE}", by="tester")
    finally:
        con.close()
    return run_id


def test_user_text_full_of_images_and_links_fetches_nothing(tmp_path, browser):
    """Every page, with a run whose name, error, task id, verifier reason, tags and note, and the
    URL's ?run= and ?traj=, hold markdown images and links: the browser requests nothing off
    127.0.0.1, draws no image or link to them, shows the text as typed, and the server opens no
    socket off the machine."""
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    run_id = _hostile_store(runs_dir)
    sockets = Sockets(tmp_path)
    hostile_param = "x" + HOSTILE
    pages = ["/", f"/Live?run={run_id}", f"/Live?run={hostile_param}", f"/Compare?run={run_id}",
             f"/Compare?run={run_id}&run={hostile_param}", f"/Review?run={run_id}&traj={hostile_param}",
             f"/Review?run={hostile_param}", f"/Hardware?run={run_id}", "/Launch"]
    with running_dashboard(tmp_path, runs_dir, env=sockets.env()) as base_url:
        with sockets.sampling(urlsplit(base_url).port):
            tab = browser.new_page(viewport={"width": 1400, "height": 2400})
            requests: list[str] = []
            tab.on("request", lambda request: requests.append(request.url))
            shown = ""
            for path in pages:
                tab.goto(base_url + path)
                tab.get_by_text("Runs directory").wait_for(timeout=60_000)  # the page itself is drawn
                wait_idle(tab)
                time.sleep(1)
                assert tab.evaluate(LINKS_TO_TEST_NET) == [], path
                assert tab.locator('[data-testid="stException"]').count() == 0, path
                shown += tab.evaluate("document.body.innerText").replace("\u2060", "")
    off_host = [url for url in requests if urlsplit(url).hostname not in ("127.0.0.1",) and not url.startswith(("data:", "blob:"))]
    assert off_host == []
    assert any(url.startswith(base_url) for url in requests)  # the recorder saw the pages' own requests
    for text in (f"reason {HOSTILE}", f"error {HOSTILE}", "There is no run x![x](http://203.0.113.7/x.png)"):
        assert text in shown, text
    assert sockets.off_machine() == []

"""ui.guard's rules, as pure functions: which Host and Origin may reach the dashboard, and the
dashboard's key file. The server and browser tests are tests/app/test_browser_security.py."""

from __future__ import annotations

import stat

import pytest

from ui import guard

PORT = 8501


@pytest.mark.parametrize("host", ["127.0.0.1:8501", "localhost:8501", "[::1]:8501", "LOCALHOST:8501", "localhost.:8501"])
def test_the_dashboards_own_names_on_its_own_port_are_allowed(host):
    assert guard.host_allowed(host, PORT)


@pytest.mark.parametrize("host", [
    "evil.example:8501",       # a DNS-rebound name: the page's own name, now on 127.0.0.1
    "127.0.0.1",               # no port: port 80, not the dashboard's
    "localhost:3000",          # the right name, another port
    "127.0.0.1.evil.example:8501", "user@127.0.0.1:8501", "127.0.0.1:8501/x", "", None, "[::1", "127.0.0.1:99999",
])
def test_any_other_host_is_refused(host):
    assert not guard.host_allowed(host, PORT)


def test_a_name_the_user_adds_is_allowed_on_the_dashboards_port(monkeypatch):
    monkeypatch.setenv(guard.ALLOWED_HOSTS_ENV, "mybox, MyBox.lan")
    assert guard.host_allowed("mybox.lan:8501", PORT) and guard.host_allowed("mybox:8501", PORT)
    assert not guard.host_allowed("mybox:8502", PORT) and not guard.host_allowed("other:8501", PORT)


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8501", "http://localhost:8501", "http://[::1]:8501"])
def test_the_dashboards_own_origin_is_allowed(origin):
    assert guard.origin_allowed(origin, PORT)


@pytest.mark.parametrize("origin", [
    None, "",                   # a client that is not a browser page sends none
    "null",                     # a sandboxed frame or a file:// page
    "http://localhost:3000",    # another local server's page: same host, other port
    "http://127.0.0.1:3000", "http://evil.example", "http://evil.example:8501", "https://127.0.0.1",
    "ws://127.0.0.1:8501", "http://127.0.0.1:8501/path",
])
def test_any_other_origin_is_refused(origin):
    assert not guard.origin_allowed(origin, PORT)


def test_a_websocket_needs_its_origin_and_a_page_request_may_omit_it():
    assert guard.refusal("127.0.0.1:8501", None, PORT, websocket=True)
    assert guard.refusal("127.0.0.1:8501", None, PORT, websocket=False) is None
    assert guard.refusal("127.0.0.1:8501", "http://localhost:3000", PORT, websocket=False)
    assert "evil.example" in guard.refusal("evil.example:8501", "http://evil.example:8501", PORT, websocket=False)


def test_the_key_is_made_once_readable_by_its_owner_only(tmp_path):
    key = guard.load_key(tmp_path)
    path = guard.key_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 40 and guard.load_key(tmp_path) == key  # kept: the same key after a restart
    assert guard.load_key(tmp_path / "other") != key            # each runs directory has its own
    assert guard.link(tmp_path, 8600) == f"http://127.0.0.1:8600/?key={key}"


def test_a_key_file_others_could_read_is_narrowed_and_a_damaged_one_named(tmp_path):
    key = guard.load_key(tmp_path)
    path = guard.key_path(tmp_path)
    path.chmod(0o644)
    assert guard.load_key(tmp_path) == key and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("short\n")
    with pytest.raises(ValueError, match="does not hold a dashboard key"):
        guard.load_key(tmp_path)


def test_keys_are_compared_whole():
    assert guard.key_matches("abc" * 15, "abc" * 15)
    assert not guard.key_matches("abc" * 14, "abc" * 15) and not guard.key_matches(None, "abc") and not guard.key_matches("", "")


def test_the_script_engine_is_off_unless_the_user_turns_it_on(monkeypatch):
    monkeypatch.delenv(guard.SCRIPT_ENGINE_ENV, raising=False)
    assert not guard.script_engine_allowed()
    monkeypatch.setenv(guard.SCRIPT_ENGINE_ENV, "1")
    assert guard.script_engine_allowed()

"""The dashboard's one Streamlit helper: the cached store and launcher, the background ingest
loop, and the page frame (title, sidebar, error handling, refreshing panels).

app.py and pages/ -> **ui** -> agentrl. The dashboard process is the store's only writer: the
first page view opens `<runs_dir>/agentrl.duckdb`, and a daemon thread reconciles run liveness,
ingests new chunks, assigns new runs their colour and samples the machine's CPU every quarter
second. Pages query through `cursor()` (one DuckDB cursor per call, so Streamlit's script threads
never share one). The run pickers every page shares live in `ui.pickers`; the Launch form in
`ui.forms`; who may see and act on the dashboard in `ui.guard` (installed by this import, before
any page is drawn); user text shown as typed in `ui.text`; Review's keys and badges in `ui.reviewing`.
"""

from __future__ import annotations

import atexit
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import streamlit as st

from agentrl import charts
from agentrl.analysis.hardware import CpuMeter
from agentrl.launcher import Launcher
from agentrl.ray_backend import BackendError
from agentrl.record.rundir import RunsDirError, default_runs_dir, ensure_writable
from agentrl.store import queries
from agentrl.store.db import (
    StoreError,
    StoreFullError,
    damaged,
    full_disk,
    full_disk_first,
    hold_runs_dir,
    is_damage,
    is_full_disk,
    is_invalidated,
    release_runs_dir,
    store_error,
)
from agentrl.store.ingest import BackgroundIngest, Ingestor, connect
from agentrl.store.maintenance import Maintenance
from agentrl.store.watch import CommitWatch
from ui import guard, home_label
from ui.text import plain

guard.install()  # a plain `streamlit run app.py` is guarded from the first page view on

INGEST_INTERVAL_S = 0.25
LIVE_REFRESH_S = 1.0  # progress and counters of a running run
CHART_REFRESH_S = 3.0  # its charts: a browser on a busy machine needs seconds to draw a set


@dataclass
class Services:
    runs_dir: Path
    con: duckdb.DuckDBPyConnection
    ingestor: Ingestor
    launcher: Launcher
    loop: BackgroundIngest
    cpu: CpuMeter
    maintenance: Maintenance | None = None

    def invalidated(self) -> bool:
        """Whether DuckDB gave up on the store (a checkpoint that found the disk full): every query
        fails until the store is opened again. Asked only while a thread reports an error."""
        if not (self.loop.last_error or (self.maintenance is not None and self.maintenance.last_error)):
            return False
        try:
            with self.con.cursor() as probe:
                probe.execute("SELECT 1")
        except duckdb.Error as error:
            return is_invalidated(error) or isinstance(error, duckdb.ConnectionException)
        return False

    def shutdown(self) -> None:
        """Stop the threads, close the store and let go of the runs directory (at exit, or when
        Streamlit releases the cached services); a second call does nothing."""
        if self.maintenance is None:
            return
        maintenance, self.maintenance = self.maintenance, None
        self.loop.stop()
        maintenance.stop()
        with contextlib.suppress(duckdb.Error):
            self.con.close()
        release_runs_dir(self.runs_dir)


def _release(services: Services) -> None:
    services.shutdown()


# Released (threads stopped, store closed) when Streamlit clears its resource cache, not only at exit.
@st.cache_resource(show_spinner=False, on_release=_release)
def _services(runs_dir: str) -> Services:
    path = ensure_writable(Path(runs_dir))
    hold_runs_dir(path)  # for the dashboard's lifetime: no command makes a second store beside ours
    try:
        con = connect(path, wait_s=10.0)
    except StoreError:
        release_runs_dir(path)  # a damaged store: `rebuild` may run while the pages say so
        raise
    ingestor = Ingestor(con, path)
    launcher = Launcher.from_environment(path)  # AGENTRL_BACKEND=ray: runs start as Ray jobs
    cpu = CpuMeter()

    def tick() -> None:
        cpu.sample()
        try:
            launcher.reconcile()
            ingestor.ingest()
            queries.assign_run_colors(con)  # a run's colour is fixed the first time it is seen
        except duckdb.Error as error:  # one line: "the disk is full", "damaged, rebuild", ...
            raise store_error(path, error) from None

    # In a thread of its own: checkpoints between ingest transactions (never inside one), and
    # each finished run's commits compacted into one. Made before the ingest thread starts: it
    # sets up the store's connection, and DuckDB refuses a connection two threads use at once.
    maintenance = Maintenance(ingestor, path)
    try:
        tick()  # the first page shows what is already on disk
    except StoreFullError:
        # A full disk is no reason to refuse the pages: what is stored reads as before, the loop
        # below says "the disk is full" and takes the rest once there is room.
        pass
    # Woken by a run's new commit, not only by the clock: a logged step is on the page sooner.
    loop = BackgroundIngest(tick, interval=INGEST_INTERVAL_S, wake=CommitWatch(path).changed)

    services = Services(path, con, ingestor, launcher, loop, cpu, maintenance)
    atexit.register(services.shutdown)
    return services


def services() -> Services:
    """The dashboard's services; opened again when DuckDB gave up on the store after a full disk
    (nothing is lost: the committed transactions are in its log, the chunks on disk), so the pages
    recover by themselves once there is room, without a restart."""
    key = str(default_runs_dir().resolve())
    svc = _services(key)
    if svc.invalidated():
        _services.clear()  # on_release shuts the old services down: every connection to the file closed
        svc = _services(key)
    return svc


def cursor() -> duckdb.DuckDBPyConnection:
    return services().con.cursor()


@st.cache_resource(show_spinner=False)
def _favicon():
    """Drawn locally: a material-icon favicon would be fetched from a font CDN, and a local-first
    dashboard makes no request off this machine."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.ellipse((4, 4, 60, 60), fill=(21, 101, 192, 255))
    draw.line((16, 44, 28, 30, 38, 38, 50, 18), fill=(255, 255, 255, 255), width=6)
    return image


def page(title: str) -> Services | None:
    """Set up a page; returns the services, or None after showing why the store is unavailable."""
    st.set_page_config(page_title=f"{title} · agentrl", page_icon=_favicon(), layout="wide")
    session = _network_session()
    refused = session and guard.session_refusal(*session)
    if refused:  # a session that connected before the guard was installed, from a foreign Host or Origin
        st.error(plain(refused))
        st.stop()
        return None
    try:
        svc = services()
    except (RunsDirError, StoreError, BackendError) as error:  # held, damaged: one line, with the command that helps
        st.error(f"The run store is unavailable: {plain(error)}")
        st.stop()
        return None
    # A panel that refreshes itself every second must not dim while it does (Streamlit fades a
    # stale element after half a second): panels drawn inside `steady()` never fade.
    st.html("<style>[class*='st-key-steady'] [data-stale='true'], [data-stale='true']:has([class*='st-key-steady'])"
            " { opacity: 1 !important; transition: none !important; }</style>")
    home_label.install()  # "Runs", not "app", in the sidebar
    with st.sidebar:
        st.caption(f"Runs directory: {plain(svc.runs_dir)}")
        if not may_act():
            st.info(VIEW_ONLY, icon=":material/lock:")
        if svc.loop.last_error:
            st.warning(f"Background ingest: {plain(svc.loop.last_error)}")
        elif svc.loop.last_tick_at:
            st.caption(f"Ingested {time.time() - svc.loop.last_tick_at:.1f}s ago")
    return svc


@contextlib.contextmanager
def shown_errors(what: str):
    """Turn any exception in a page section into a one-line message instead of a traceback."""
    try:
        yield
    except Exception as error:  # the user sees what failed, never a stack trace
        if is_full_disk(error):  # not damage: nothing is lost, and the page recovers once there is room
            error = (full_disk(default_runs_dir().resolve() / "agentrl.duckdb") if isinstance(error, duckdb.Error)
                     else StoreError(full_disk_first(" ".join(str(error).split()))))
        elif is_damage(error):  # a damaged block found by this query: say how to rebuild, not DuckDB's words
            error = damaged(default_runs_dir().resolve() / "agentrl.duckdb", error)
        st.error(f"Could not {what}: {plain(error)}" if isinstance(error, StoreError) else
                 f"Could not {what}: {type(error).__name__}: {plain(error)}")


VIEW_ONLY = ("View only: this browser does not hold the dashboard's key, so it cannot start, cancel, delete or "
             "promote runs. Open the link that `make run` printed (`.venv/bin/python -m ui.serve --link` prints it "
             "again).")


def _network_session():
    """(headers, cookies) of this session's WebSocket handshake; None for a run in this process
    (streamlit.testing's AppTest sets `global.appTest`, which no client can), which no network
    client can reach."""
    from streamlit import config

    if config.get_option("global.appTest"):
        return None
    return st.context.headers, st.context.cookies


def may_act() -> bool:
    """Whether this session may start, cancel, delete or promote: its browser holds the
    dashboard's key (ui.guard), and its Host and Origin are the dashboard's own."""
    session = _network_session()
    if session is None:
        return True
    try:
        return guard.session_refusal(*session) is None and guard.session_holds_key(session[1])
    except (OSError, ValueError):  # the key file cannot be read: nobody acts until it can
        return False


def allowed(what: str) -> bool:
    """`may_act()`, checked again where an action is handled (a button drawn disabled can still be
    sent as clicked by a client of its own); says why not."""
    if may_act():
        return True
    st.error(f"Cannot {what}: {VIEW_ONLY}")
    return False


def table(df, key: str, name: str, shown=None, **dataframe_kwargs):
    """A table view with CSV and Parquet downloads of exactly what it shows (`shown`, when given,
    is how it shows `df`: a Styler of it, or its cells as words)."""
    from agentrl.store.export import frame_to_bytes

    event = st.dataframe(df if shown is None else shown, hide_index=True, key=key, **dataframe_kwargs)
    row = st.container(horizontal=True)
    with shown_errors("prepare the download"):
        row.download_button("CSV", frame_to_bytes(df, "csv"), file_name=f"{name}.csv", mime="text/csv",
                             key=f"{key}-csv", icon=":material/download:", width="content")
        row.download_button("Parquet", frame_to_bytes(df, "parquet"), file_name=f"{name}.parquet",
                              mime="application/octet-stream", key=f"{key}-parquet", icon=":material/download:", width="content")
    return event


def selection_key(name: str, ids: list[str]) -> str:
    """The key of a selectable table whose rows are the things `ids` names, in order. A selection
    is row numbers of the table as it was drawn; when the table changed since (a run started, a
    filter changed), those numbers point at other things, so the table gets a new key: the
    selection, and with it anything confirmed for it, starts again (and the page says so)."""
    version = st.session_state.setdefault(f"_{name}-version", 0)
    drawn = st.session_state.get(f"_{name}-drawn")  # the ids, in the order the user saw them
    rows = (st.session_state.get(f"{name}-{version}") or {}).get("selection", {}).get("rows", [])
    if rows and drawn is not None and drawn != ids:
        version = st.session_state[f"_{name}-version"] = version + 1
        st.info("The table changed since you selected rows (a row was added, or a filter changed): select again.",
                icon=":material/refresh:")
    st.session_state[f"_{name}-drawn"] = list(ids)
    return f"{name}-{version}"


def bound_key(action: str, ids: list[str]) -> str:
    """A widget key naming the exact things an action is for: a tick given for one set of runs is
    never the tick of another set (that is another, unticked box)."""
    import hashlib

    return f"{action}-{hashlib.sha1(chr(0).join(sorted(ids)).encode()).hexdigest()[:16]}"


def reviewer_name() -> str:
    """The person making decisions in this browser session, asked once in the sidebar."""
    import getpass

    if "reviewer" not in st.session_state:
        try:
            st.session_state["reviewer"] = getpass.getuser()
        except Exception:  # no user name on this system: the person types one
            st.session_state["reviewer"] = ""
    return st.sidebar.text_input("Reviewer", key="reviewer", help="Recorded with every review and promotion decision.")


def flash(message: str) -> None:
    """Redraw the page now, with `message` shown once at the top: a decision made by a button
    must show in the tables above it, which were drawn before the button was handled."""
    st.session_state["_flash"] = message
    st.rerun()


def show_flash() -> None:
    """The message `flash` left, in a slot drawn on every run: the elements below keep their
    places in the page, so a table keeps its sort and selection across the redraw."""
    slot = st.empty()
    message = st.session_state.pop("_flash", None)
    if message:
        slot.success(message, icon=":material/check_circle:")


def stop_without_runs(runs, message: str = "No runs yet. Start one on the Launch page.") -> None:
    """On an empty store: say so, link to Launch, and end the page here."""
    if runs.empty:
        st.info(message)
        st.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")
        st.stop()


def steady(key: str = "steady"):
    """A container whose elements never fade while a refresh redraws them (see `page`). Keys
    must start with 'steady'."""
    if not key.startswith("steady"):
        raise ValueError("a steady container's key starts with 'steady'")
    return st.container(key=key)


def refreshing(active: bool, interval: float = LIVE_REFRESH_S):
    """`st.fragment` that reruns itself every `interval` seconds while `active`, and not at all
    otherwise: a page about finished runs sends nothing more once drawn."""
    return st.fragment(run_every=interval if active else None)


def remembered(name: str, version, build):
    """`build()`, or what it returned the last time in this session for the same `version`: a
    refresh that finds nothing new re-sends identical charts, which the browser keeps in place
    (a chart whose figure changed is drawn anew)."""
    slot = st.session_state.setdefault("_remembered", {})
    if name in slot and slot[name][0] == version:
        return slot[name][1]
    value = build()
    slot[name] = (version, value)
    return value


def chart(figure, key: str, where=None) -> None:
    """`st.plotly_chart` for a panel that refreshes itself. Streamlit names a chart by its figure,
    so a chart with new data is a new element; replaced in place inside a fragment, the old one
    was kept hidden in the page (one more per refresh, until the next full run). In a container
    named by the figure's fingerprint, the whole container is replaced instead and nothing is
    left behind; an unchanged figure keeps its container and its chart, untouched."""
    with (where or st).container(key=f"{key}-{charts.fingerprint(figure):08x}"):
        st.plotly_chart(figure, key=key)


def watch(name: str, version, interval: float = 2.0) -> None:
    """Redraw the whole page when `version()` changes, checked every `interval` seconds by a
    cheap query: another person's decision, a run that started, stepped or ended. Call it before
    the page handles its own buttons, so this session's own changes do not redraw it twice."""
    slot = f"_watch-{name}"
    st.session_state[slot] = version()  # the page as drawn now

    @st.fragment(run_every=interval)
    def _watch() -> None:
        if version() != st.session_state.get(slot):
            st.rerun(scope="app")

    _watch()


def acknowledge(name: str, version) -> None:
    """This session's own change, redrawn in place: the watch `name` need not redraw the page for it."""
    st.session_state[f"_watch-{name}"] = version()


def watch_decisions(interval: float = 2.0) -> None:
    """Redraw when anyone, in any browser session, records a review, a fixture, a promotion or a run note."""
    watch("decisions", lambda: queries.decisions_version(cursor()), interval)

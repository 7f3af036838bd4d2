"""Start the dashboard guarded from its first request: `python -m ui.serve [streamlit options]`.

`make run` -> **ui.serve** -> `streamlit run app.py`. Installs `ui.guard` before Streamlit's
server listens (a plain `streamlit run app.py` is guarded from its first page view on), makes the
runs directory's key, and prints the link that gives a browser the key: without it a browser
sees the dashboard read-only.

    python -m ui.serve --server.port 8501            # start; prints the link
    python -m ui.serve --link --server.port 8501     # print the link again, start nothing
    python -m ui.serve --allow-script-engine ...     # let Launch run the script engine's command
"""

from __future__ import annotations

import os
import sys

from agentrl.record.rundir import default_runs_dir


def _port(args: list[str]) -> int:
    for i, arg in enumerate(args):
        if arg.startswith("--server.port="):
            return int(arg.split("=", 1)[1])
        if arg == "--server.port" and i + 1 < len(args):
            return int(args[i + 1])
    return int(os.environ.get("STREAMLIT_SERVER_PORT") or 8501)


def main(argv: list[str]) -> int:
    from ui import guard

    args = [a for a in argv if a not in ("--link", "--allow-script-engine")]
    try:
        port = _port(args)
    except ValueError:
        print("--server.port takes a port number", file=sys.stderr)
        return 2
    runs_dir = default_runs_dir().resolve()
    try:
        link = guard.link(runs_dir, port)
    except (OSError, ValueError) as error:
        print(f"cannot read or make the dashboard key: {error}", file=sys.stderr)
        return 1
    if "--link" in argv:
        print(link)
        return 0
    if "--allow-script-engine" in argv:
        os.environ[guard.SCRIPT_ENGINE_ENV] = "1"
    guard.install()
    print(f"agentrl dashboard: open {link}\n  (the link gives this browser the key to start, cancel, delete and promote "
          f"runs; kept in {guard.key_path(runs_dir)})", flush=True)
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", "app.py", *args]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``mosaic site build|serve``: write a site as static HTML, and serve a site folder on 127.0.0.1."""

from __future__ import annotations

import argparse
import errno
import logging
import sys
from pathlib import Path

from envs.web.progress import progress_bar
from envs.web import load_site, server
from envs.web.corpus import TASKS_FILE, page_file, write_tasks

from .common import HelpFormatter, add_flags

PORT = 8001  # (8000: transformers serve and vLLM; 8002: mosaic view)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "site",
        help="build a site as static HTML, or serve a site folder in a browser",
        description="Write a site (the builtin one, or a corpus) as a folder of static HTML pages with its "
        "tasks, or serve such a folder on 127.0.0.1 to browse it.",
    )
    sub = p.add_subparsers(dest="site_command", metavar="{build,serve}", required=True)

    build = sub.add_parser(
        "build",
        help="write every page as DIR/<path>.html, plus DIR/tasks.jsonl",
        description="Write every page of a site as static HTML (the home page as DIR/index.html, /wiki/X as "
        "DIR/wiki/X.html) and its tasks as DIR/tasks.jsonl. The folder loads back as a corpus "
        "(--site DIR, or gym.make(..., site=DIR)) with the same pages and tasks, and `mosaic site serve DIR` "
        "serves it.",
        epilog="example: mosaic site build --out site-0 --site-seed 0 --site-size 2000",
        formatter_class=HelpFormatter,
    )
    build.add_argument("--out", required=True, type=Path, metavar="DIR", default=argparse.SUPPRESS,
                       help="folder to write (created if missing)")
    add_flags(build, ("site", "site_seed", "site_size"), {"site_size": "(default: the builtin site's, 2000)"})
    build.add_argument("--force", action="store_true",
                       help="write into --out even if it is not empty (files already there stay)")

    serve = sub.add_parser(
        "serve",
        help="serve a site folder on http://127.0.0.1:PORT",
        description="Serve a site folder (from `mosaic site build`, or a corpus of HTML files) on 127.0.0.1, "
        "with a live search page at /search?q=... . Only this machine can connect. Ctrl-C stops.",
        epilog=f"example: mosaic site serve site-0 --port {PORT}",
        formatter_class=HelpFormatter,
    )
    serve.add_argument("dir", type=Path, metavar="DIR", help="the site folder")
    serve.add_argument("--port", type=int, default=PORT, metavar="N",
                       help="port on 127.0.0.1 (0: any free port; 8000 is left to inference servers, 8002 to mosaic "
                            "view)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        return build(args) if args.site_command == "build" else serve(args)
    except (ValueError, OSError) as err:  # CorpusError is a ValueError
        print(f"mosaic site {args.site_command}: {err}", file=sys.stderr)
        return 2


def build(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise ValueError(f"{out} is not empty; choose a new folder, or pass --force to write into it")
    size = {} if args.site_size is None else {"site_size": args.site_size}
    site = load_site(args.site, site_seed=args.site_seed, **size)
    paths = [doc.path for doc in site.documents()]
    if "/" not in paths and site.page_html("/") is not None:
        paths.insert(0, "/")
    for path in progress_bar(paths, desc="writing pages", unit="page"):
        html = site.page_html(path)
        if html is None:
            raise ValueError(f"site {site.name!r} lists a page at {path} but serves nothing there")
        file = out / page_file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(html, encoding="utf-8")
    write_tasks(site.tasks, out / TASKS_FILE)
    print(f"wrote {len(paths)} pages and {len(site.tasks)} tasks to {out}/ (browse it: mosaic site serve {out})")
    return 0


def serve(args: argparse.Namespace) -> int:
    try:
        running = server.serve(args.dir, port=args.port)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise OSError(f"port {args.port} on 127.0.0.1 is in use: choose another with --port N "
                          "(--port 0 takes any free port)") from None
        raise
    handler = logging.StreamHandler()  # one line a request, as http.server prints them
    server.log.addHandler(handler)
    server.log.setLevel(logging.INFO)
    print(f"serving {args.dir} at {running.url}/ (search: {running.url}/search?q=...); Ctrl-C stops", flush=True)
    try:
        running.wait()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        running.shutdown()
        server.log.removeHandler(handler)
    return 0

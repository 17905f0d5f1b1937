"""Take docs/dashboard-page.png and docs/images/dashboard-*.png: the live Podracer pages of a real short
tournament, in headless Chromium.

    python docs/make_dashboard_screenshot.py [--config workflows/configs/pendulum.toml] [--segments 12]
                                             [--pages page,lineage,hparams] [--keep-store DIR]

Starts the embedded LocalCluster (two worker processes, which preloads the live page),
runs the config's tournament in a thread on a fresh store, waits until `--segments`
segments have finished and one is training, then points Debian's `chromium`
(`apt-get install chromium`) at `<dashboard>/individual-podracer` and at the lineage and
hyper-parameter panels. `--keep-store` copies the run's store there afterwards (for
`podracer plot`, `status` and `tensorboard` pictures of the same run). Takes a few minutes on
a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = {  # name: (route suffix, picture, the model whose presence means the page is drawn, window height)
    "page": ("", ROOT / "docs" / "dashboard-page.png", "podracer-leaderboard", 1060),
    "lineage": ("-lineage", ROOT / "docs" / "images" / "dashboard-lineage.png", "podracer-lineage", 640),
    "hparams": ("-hparams", ROOT / "docs" / "images" / "dashboard-hparams.png", "podracer-score-vs-actor_lr", 760),
}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def screenshot(url: str, out: Path, width: int = 1400, height: int = 1060, timeout: float = 60.0,
               ready: str = "podracer-leaderboard") -> None:
    """Open `url` in headless Chromium (a fresh profile) and save a PNG once BokehJS has drawn the page.

    `chromium --screenshot` shoots at the load event, before the Bokeh server has sent the
    document over its websocket (and `--virtual-time-budget` does not wait for websockets):
    so the page is driven over the DevTools protocol, and shot once the document's
    `ready` model (the leaderboard's, by default) exists, plus a moment to lay out.
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("make_dashboard_screenshot: no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile, open(Path(profile) / "stderr.log", "w+") as log:
        # stderr to a file, not a pipe: chromium logs a lot (no D-Bus here) and would block on a full pipe
        browser = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}/data",
                                    "--remote-debugging-port=0", "--remote-allow-origins=*",
                                    f"--window-size={width},{height}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=log)
        try:
            port = _devtools_port(Path(log.name), timeout)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                page = next(t for t in json.load(answer) if t["type"] == "page")
            png = asyncio.run(_drive(page["webSocketDebuggerUrl"], url, width, height, timeout, ready))
        finally:
            browser.terminate()
            browser.wait(timeout=30)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)


def _devtools_port(log: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # chromium says "DevTools listening on ws://127.0.0.1:PORT/devtools/..."
        found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.2)
    raise SystemExit("make_dashboard_screenshot: chromium did not open its DevTools port")


async def _drive(devtools: str, url: str, width: int, height: int, timeout: float, ready: str) -> bytes:
    """Over the DevTools websocket of one tab: size it, open `url`, wait for the document, shoot."""
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(devtools, max_message_size=256 << 20)
    ids = iter(range(1, 1 << 30))

    async def call(method: str, **params):
        ident = next(ids)
        await ws.write_message(json.dumps({"id": ident, "method": method, "params": params}))
        while True:  # skip the events chromium sends meanwhile
            message = json.loads(await ws.read_message())
            if message.get("id") == ident:
                if "error" in message:
                    raise SystemExit(f"make_dashboard_screenshot: {method}: {message['error']}")
                return message["result"]

    await call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
    await call("Page.navigate", url=url)
    drawn = ("!!(window.Bokeh && Bokeh.documents.length && "
             f"Bokeh.documents[0].get_model_by_name({ready!r}))")
    deadline = time.monotonic() + timeout
    while not (await call("Runtime.evaluate", expression=drawn, returnByValue=True))["result"].get("value"):
        if time.monotonic() > deadline:
            raise SystemExit(f"make_dashboard_screenshot: {url} drew no Podracer document in {timeout:.0f}s")
        await asyncio.sleep(0.5)
    await asyncio.sleep(3.0)  # layout and the first paint of the tables and plots
    shot = await call("Page.captureScreenshot", format="png")
    ws.close()
    return base64.b64decode(shot["data"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "workflows" / "configs" / "pendulum.toml"))
    parser.add_argument("--segments", type=int, default=12, help="finished segments before the picture")
    parser.add_argument("--pages", default=",".join(PAGES), help=f"which pictures, of {', '.join(PAGES)}")
    parser.add_argument("--keep-store", metavar="DIR", help="copy the run's store to DIR afterwards")
    args = parser.parse_args(argv)
    pages = [PAGES[name] for name in args.pages.split(",")]

    import torch
    from distributed import Client

    from dask_podracer.config import load_config
    from dask_podracer.population import embedded_cluster, run_tournament
    from dask_podracer.store import PodracerStore, StoreError

    def finished() -> int:
        try:
            return sum(r["status"] == "finished" for r in PodracerStore(config.store_url).read_history())
        except StoreError:  # not created yet
            return 0

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(args.config).replace(store=f"{tmp}/shot.zarr", budget="10m", target_return=None,
                                                  max_segments=args.segments + 6)
        config = dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, workers=2,
                                                                           dashboard_address="127.0.0.1:0"))
        with embedded_cluster(config.cluster) as cluster, Client(cluster) as client:
            run = threading.Thread(target=run_tournament, args=(config, client), daemon=True)
            run.start()
            url = f"http://127.0.0.1:{client.scheduler_info()['services']['dashboard']}/individual-podracer"
            while run.is_alive():
                time.sleep(1.0)
                done = finished()
                if done >= args.segments and any(client.processing().values()):
                    for suffix, out, ready, height in pages:
                        screenshot(url + suffix, out, height=height, ready=ready)
                        print(f"wrote {out} from {url + suffix} after {done} segments")
                    break
            run.join()
        if args.keep_store:
            shutil.copytree(config.store_url, args.keep_store, dirs_exist_ok=False)
            print(f"kept the store at {args.keep_store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

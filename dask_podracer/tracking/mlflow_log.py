"""An MLflow experiment of a tournament: a run for the tournament, and one nested run per agent.

Written on the client, from history records, with `MlflowClient` (the `mlflow` extra: mlflow-skinny, with
SQLAlchemy and Alembic for a local database). Each finished segment logs the scalars of
`scalars.segment_scalars` as metrics at step = the lineage's env steps and timestamp = the run's clock.
An agent's run gets its first segment's hyper-parameters as params (MLflow params never change; the
tuned ones are also metrics, `hparams/<name>`, so their course shows) and the latest segment as a tag.

The tracking URI is MLflow's (`sqlite:///...`, `http://host:5000`, `databricks`, ...), or a plain
directory path: then a SQLite database `DIR/mlflow.db` with artifacts under `DIR/artifacts`
(MLflow's plain-file store is in maintenance mode and refuses to open without an opt-in). A resumed
tournament (same store, same experiment) logs on into the runs it had.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dask_podracer.tracking.errors import TrackingError
from dask_podracer.tracking.scalars import agent_run, logged, segment_scalars, step

BATCH = 1000
"""MLflow's limit of metrics in one `log_batch`."""


def resolve_uri(uri: str) -> tuple[str, str | None]:
    """(tracking URI, artifact location of a new experiment or None for the server's own)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", uri):  # a scheme of two letters or more: not a drive letter
        return uri, None
    directory = Path(uri).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'mlflow.db'}", (directory / "artifacts").as_uri()


def check_server(uri: str, timeout: float = 10.0) -> None:
    """One line, in seconds, when an `http(s)://` tracking URI has no server answering: MLflow's client retries a
    refused connection with backoff for about four minutes before it raises. Any HTTP answer will do (a login page,
    a 404: MLflow then says what is wrong); requests, as MLflow, takes its proxies from the environment."""
    import requests

    try:
        requests.get(uri, timeout=timeout, allow_redirects=False).close()
    except requests.exceptions.SSLError:
        return  # a server answered; whether MLflow trusts its certificate is MLflow's to say
    except requests.exceptions.InvalidURL as e:
        raise TrackingError(f"[logging] mlflow {uri!r} is not a valid URL: {e}") from None
    except (requests.ConnectionError, requests.Timeout) as e:
        reason = re.findall(r"\[Errno -?\d+\] ([^'\")]+)", str(e))
        why = reason[-1] if reason else (f"no answer within {timeout:.0f}s" if isinstance(e, requests.Timeout)
                                         else type(e).__name__)
        raise TrackingError(f"cannot reach the MLflow tracking server at {uri!r}: {why}") from None


def require_mlflow(tracking_uri: str) -> None:
    needed = ["mlflow"] + (["sqlalchemy", "alembic"] if tracking_uri.startswith("sqlite:") else [])
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise TrackingError(f"[logging] mlflow needs {' and '.join(missing)}: pip install 'dask-podracer[mlflow]'")


@contextlib.contextmanager
def _quiet_database_setup() -> Iterator[None]:
    """MLflow logs at INFO, on its own handler, that it creates and migrates a new SQLite database's tables (and
    Alembic each migration): lines on the terminal of a `podracer train --quiet`. Warnings and errors still show."""
    loggers = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.level, logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


class MLflowLog:
    def __init__(self, uri: str, experiment: str, store_url: str, origin: float) -> None:
        try:
            tracking_uri, artifacts = resolve_uri(uri)
        except OSError as e:  # a directory that cannot be made: under a file, in /proc, without permission
            raise TrackingError(f"cannot create the MLflow tracking store {uri!r}: {e.strerror or e} "
                                f"({e.filename})") from None
        require_mlflow(tracking_uri)
        if re.match(r"^https?://", tracking_uri, re.IGNORECASE):
            check_server(tracking_uri)
        from mlflow.tracking import MlflowClient

        self.origin = origin
        self.store_id = hashlib.sha1(store_url.encode()).hexdigest()[:16]
        self.runs: dict[str, str] = {}  # agent run name -> MLflow run id
        try:
            with _quiet_database_setup():
                self.client = MlflowClient(tracking_uri=tracking_uri)
                found = self.client.get_experiment_by_name(experiment)
            if found is not None and found.lifecycle_stage != "active":
                raise TrackingError(f"the MLflow experiment {experiment!r} at {uri!r} is deleted: restore it "
                                    f"or log to another [logging] mlflow")
            self.experiment_id = (found.experiment_id if found is not None else
                                  self.client.create_experiment(experiment, artifact_location=artifacts))
            self.parent = self._find("tournament") or self.client.create_run(
                self.experiment_id, run_name=experiment,
                tags={"podracer_store": store_url, "podracer_store_id": self.store_id, "podracer_run": "tournament"},
            ).info.run_id
        except TrackingError:
            raise
        except Exception as e:  # noqa: BLE001 - MLflow raises many kinds (a server down, a bad URI): one line
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise TrackingError(f"cannot open the MLflow tracking store {uri!r}: {first}") from None

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        from mlflow.entities import Metric, RunTag

        # each agent's metrics in as few batches as fit: one call (a database transaction, or a server round trip)
        # per record took 50 ms on a local database, 5 minutes for the 6,000 records of a long run
        metrics: dict[str, list[Metric]] = {}
        latest: dict[str, str] = {}
        for record in records:
            if not logged(record):
                continue
            run_id = self._run(record)
            x, millis = step(record), round((self.origin + float(record.get("wall_seconds") or 0.0)) * 1000)
            metrics.setdefault(run_id, []).extend(Metric(tag, value, millis, x)
                                                  for tag, value in segment_scalars(record).items())
            latest[run_id] = str(record.get("key"))
        for run_id, run_metrics in metrics.items():
            for i in range(0, len(run_metrics), BATCH):
                self.client.log_batch(run_id, metrics=run_metrics[i:i + BATCH],
                                      tags=[RunTag("podracer_latest_segment", latest[run_id])] if i == 0 else [])

    def close(self) -> None:
        for run_id in [*self.runs.values(), self.parent]:
            self.client.set_terminated(run_id, "FINISHED")

    def _run(self, record: Mapping[str, Any]) -> str:
        from mlflow.entities import Param

        name = agent_run(record)
        if name in self.runs:
            return self.runs[name]
        run_id = self._find(name)
        if run_id is None:
            run_id = self.client.create_run(self.experiment_id, run_name=name, tags={
                "mlflow.parentRunId": self.parent, "podracer_store_id": self.store_id, "podracer_run": name,
                "podracer_group": str(record.get("group") or "")}).info.run_id
            params = [Param(k, _param(v)) for k, v in sorted((record.get("hparams") or {}).items())]
            for i in range(0, len(params), 100):  # MLflow's limit of params in one batch
                self.client.log_batch(run_id, params=params[i:i + 100])
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.runs[name] = run_id
        return run_id

    def _find(self, run: str) -> str | None:
        found = self.client.search_runs([self.experiment_id], max_results=1, filter_string=(
            f"tags.podracer_store_id = '{self.store_id}' and tags.podracer_run = '{run}'"))
        return found[0].info.run_id if found else None


def _param(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)

"""docker-compose.yml describes the production shape (no Docker engine here: the file is checked by
its structure; `docker-compose config` (compose 1.29) also accepts it, see docs/service.md)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_order():
    services = COMPOSE["services"]
    assert {"postgres", "redis", "api", "worker-cpu", "worker-gpu"} <= set(services)
    api = services["api"]
    assert "alembic upgrade head &&" in " ".join(api["command"])  # migrate before serving
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"


def test_workers_are_memory_capped_and_gpu_is_optional():
    services = COMPOSE["services"]
    cpu, gpu = services["worker-cpu"], services["worker-gpu"]
    assert cpu["mem_limit"] and cpu["environment"]["LCSB_WORKER_QUEUE"] == "cpu-8g"
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]


def test_worker_classes_match_the_workers_and_their_limits():
    import json

    env = COMPOSE["services"]["api"]["environment"]
    classes = {c["queue"]: c for c in json.loads(env["LCSB_WORKER_CLASSES"])}
    assert set(classes) == {"cpu-8g", "gpu-80g"}
    from lcsb_service.settings import WorkerClass

    for fields in classes.values():  # every field the example lists is one the settings know, and valid
        assert set(fields) == set(WorkerClass.model_fields) and WorkerClass(**fields)
    limit_mib = int(COMPOSE["services"]["worker-cpu"]["mem_limit"].rstrip("g")) * 1024
    assert classes["cpu-8g"]["memory_mib"] < limit_mib  # the training child's cap fits the container
    assert env["LCSB_ENVIRONMENT"] == "production" and "LCSB_SECRET_KEY" in env
    for name in ("artifacts", "models", "pgdata"):
        assert name in COMPOSE["volumes"]


def test_every_worker_kind_has_a_service_and_the_export_worker_fits_its_cap():
    """One service per `WorkerKind` (`python -m worker --kind <kind>`); the export worker's process cap
    (LCSB_EXPORT_MEMORY_MIB) fits inside its container's limit."""
    from lcsb_service.tasks import WorkerKind

    services = COMPOSE["services"]
    kinds = {s["command"][s["command"].index("--kind") + 1] for s in services.values()
             if "--kind" in s.get("command", [])}
    assert kinds == {k.value for k in WorkerKind}
    export = services["worker-export"]
    assert export["command"] == ["python", "-m", "worker", "--kind", "export"]
    assert int(export["environment"]["LCSB_EXPORT_MEMORY_MIB"]) < int(export["mem_limit"].rstrip("g")) * 1024

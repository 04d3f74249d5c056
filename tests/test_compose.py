"""compose/: the Docker Compose layout is consistent with the CLI (no Docker needed)."""

from pathlib import Path

import pytest
import typer
import yaml

from streamfl.cli import app

COMPOSE = Path(__file__).resolve().parents[1] / "compose"


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def _env(service) -> dict:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_services_present(compose):
    assert {"kafka", "producer", "worker", "aggregator", "tracker", "prometheus"} <= set(compose["services"])


def test_kafka_is_single_node_kraft(compose):
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka")
    env = _env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@kafka:")
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert f"{controller}://" in env["KAFKA_LISTENERS"] and controller in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert "healthcheck" in kafka


def test_worker_can_scale(compose):
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker                      # fixed host ports would clash between replicas
    cmd = worker["command"]
    assert cmd[cmd.index("--worker-id") + 1] == "auto"


def test_prometheus_scrapes_the_tracker(compose):
    prom = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    tracker = compose["services"]["tracker"]["command"]
    port = tracker[tracker.index("--metrics-port") + 1]
    assert f"tracker:{port}" in targets
    assert compose["services"]["prometheus"]["image"].startswith("prom/prometheus")
    mount = compose["services"]["prometheus"]["volumes"][0].split(":")
    assert (COMPOSE / mount[0]).resolve() == (COMPOSE / "prometheus.yml").resolve()
    assert mount[1] == "/etc/prometheus/prometheus.yml"


def test_every_command_is_a_streamfl_subcommand_with_real_options(compose):
    click_app = typer.main.get_command(app)
    dockerfile = (COMPOSE / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["streamfl"]' in dockerfile
    built = [name for name, s in compose["services"].items() if "build" in s]
    assert set(built) == {"producer", "worker", "aggregator", "tracker"}
    for name in built:
        service = compose["services"][name]
        assert service["build"]["dockerfile"] == "compose/Dockerfile"
        assert (COMPOSE / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        cmd = service["command"]
        assert cmd[0] in click_app.commands, (name, cmd[0])
        sub = click_app.commands[cmd[0]]
        known = {opt for p in sub.params for opt in p.opts}
        flags = [a for a in cmd[1:] if a.startswith("--")]
        assert flags and set(flags) <= known, (name, set(flags) - known)
        assert cmd[cmd.index("--broker") + 1] == "kafka:9092"
        assert cmd[cmd.index("--config") + 1] == "/config/experiment.yaml"
        assert any(v.endswith(":/config/experiment.yaml:ro") and (COMPOSE / v.split(":")[0]).is_file()
                   for v in service["volumes"])

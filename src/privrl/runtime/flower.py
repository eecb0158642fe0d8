"""The Flower runtime's machinery: a local deployment for testing, and the agent executor.

A local deployment (`LocalDeployment`) is what `privrl run <system> --runtime flower` starts on
one machine, every part a separate operating-system process:

- a SuperLink (`flower-superlink`) serving TLS with a certificate made for this run by a CA
  made for this run, and with SuperNode authentication on (`--enable-supernode-auth`): only
  the SuperNodes whose public keys were registered (`flwr supernode register`) may connect;
- N SuperNodes (`flower-supernode`), each with its own key pair, checking the SuperLink's
  certificate against the run's CA, in `--isolation process` mode: a SuperNode runs no app
  code itself; its agent executor (below) does, and only an executor holding the run's
  SuperExec secret (`--superexec-auth-secret-file`, flwr's experimental HMAC) may take its
  tasks;
- N agent executors (`serve_tasks`), one beside each SuperNode: the agent's own process;
- the ServerApp, which the SuperLink starts (`flwr-serverapp`) when `flwr run` submits the
  app bundle.

Everything it started is stopped when the `with` block ends, also after a failure: each process
leads its own process group, which is sent SIGTERM, then SIGKILL after a grace period. What
those started in sessions of their own (the SuperLink's `flower-superexec` and the ServerApp it
launches, `flwr-serverapp`, both detached by Flower) is found while the deployment runs, as
descendants of its processes, and stopped the same way (`stop_all`).

A SuperNode is its `flower-supernode` and its agent executor: if either exits during a run,
the deployment stops the other and unregisters the SuperNode (`flwr supernode unregister`), so
that the ServerApp learns at once that its replies will not come (Flower's own heartbeat
would say so only after 2 × 30 s) and goes on with the others; only the SuperLink's exit ends
the run. The
certificates, keys and Flower's own state live in a private (0700) temporary directory that is
removed at the end; the processes' logs are kept in the run directory.

**Why an agent executor of privrl's own.** `flwr run` sends the SuperNodes an app bundle (FAB);
Flower's default executor installs it and imports the ClientApp *it names*, so whoever submits
the run chooses the code an agent executes: the flaw of a Ray cluster again. Flower 1.42's
answer, `flower-supernode --trusted-entities`, verifies only bundles fetched from Flower Hub (a
locally submitted bundle carries no verification and a SuperNode with trusted entities refuses
it: flwr/supernode/start_client_internal.py). So privrl's agent executor takes the SuperNode's
tasks itself (`AcquireTask` on the SuperNode's local runtime API), accepts only the bundle
whose SHA-256 the agent pinned when it started, answers any other with an error, and never
imports code from a bundle: it calls the agent's handler, which privrl's installed code built,
in this long-lived process (which also keeps the agent's secret noise root, ledger and released
reports in memory for the whole run). docs/flower.md.

flwr is the optional `flower` extra, imported when this module is.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from flwr.app import Context, Error, Message
from flwr.cli.build import build_fab_from_disk
from flwr.clientapp import ClientApp
from flwr.common.constant import SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import (
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
    SuperExecAuthHttpInterceptor,
)
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import (
    pull_task_input,
    push_message,
    push_task_output,
)

from privrl.federation.flower import (
    SLOT,
    WireError,
    batch_reply_content,
    read_batch,
    read_request,
    submission_content,
)
from privrl.federation.flower_sum import REFUSED
from privrl.federation.service import Submission
from privrl.privacy.ledger import BudgetExceededError

__all__ = ["REFUSED", "UNTRUSTED_BUNDLE", "Credentials", "LocalDeployment", "answer_request",
           "executor_parser", "fab_hash", "make_credentials", "refusal", "refusing_client_app",
           "serve_tasks", "superexec_secret", "write_app"]

UNTRUSTED_BUNDLE = 0x5055  # the Error code an agent executor answers another bundle with
CONNECTION = "privrl"  # the SuperLink connection's name in the run's Flower config
GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long
TRACK_S = 1.0  # how often a running deployment looks for its processes' descendants
EXECUTOR_POLL_S = 0.1  # an agent executor's wait between two asks for a task, just after one
EXECUTOR_IDLE_POLL_S = 0.25  # the same, EXECUTOR_BUSY_S after its last task ended
EXECUTOR_BUSY_S = 1.0
HEARTBEAT_AFTER_S = 10.0  # a task's first heartbeat (flwr holds a claimed task 30 s without)


def process_env(home: Path, bin_dir: Path) -> dict[str, str]:
    """The environment of the processes a local deployment starts: Flower's home in the run's
    private work directory, its commands first on PATH, and flwr's telemetry (usage events to
    telemetry.flower.ai: a run's start and stop, the platform) off unless the user set it."""
    return {**os.environ, "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": os.environ.get("FLWR_TELEMETRY_ENABLED", "0"),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


# --- credentials made for one run ----------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    ca: Path  # the run's CA certificate: what SuperNodes and the CLI trust
    certificate: Path  # the SuperLink's TLS certificate (127.0.0.1, localhost), signed by it
    key: Path  # its private key
    nodes: tuple[tuple[Path, Path], ...]  # each SuperNode's (private key, public key)


def make_credentials(directory: Path, nodes: int, days: int = 1,
                     hosts: Sequence[str] = ("127.0.0.1",)) -> Credentials:
    """A CA, the SuperLink's certificate signed by it (for localhost and the IP addresses
    `hosts`), and one EC key pair per SuperNode (OpenSSH format, as flower-supernode and
    `flwr supernode register` read them)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "privrl run CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    names += [x509.IPAddress(ipaddress.ip_address(h)) for h in dict.fromkeys(hosts)]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _private(directory / "ca.crt", ca.public_bytes(pem))
    _private(directory / "superlink.crt", cert.public_bytes(pem))
    _private(directory / "superlink.key", key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    pairs = []
    for i in range(nodes):
        k = ec.generate_private_key(ec.SECP384R1())
        private, public = directory / f"node{i}", directory / f"node{i}.pub"
        _private(private, k.private_bytes(pem, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
        _private(public, k.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH))
        pairs.append((private, public))
    return Credentials(directory / "ca.crt", directory / "superlink.crt",
                       directory / "superlink.key", tuple(pairs))


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# --- the app bundle --------------------------------------------------------------------------
def write_app(directory: Path, name: str, serverapp: str, clientapp: str,
              config: dict[str, Any]) -> Path:
    """A Flower app directory holding only pyproject.toml: the bundle names privrl's installed
    ServerApp and ClientApp (no code travels in it) and the run's parameters."""
    import tomli_w

    directory.mkdir(parents=True, exist_ok=True)
    doc = {"build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
           "project": {"name": name, "version": "1.0.0", "description": "privrl run",
                       "license": "Apache-2.0", "dependencies": []},
           "tool": {"flwr": {"app": {"publisher": "privrl",
                                     "components": {"serverapp": serverapp,
                                                    "clientapp": clientapp},
                                     "config": config}}}}
    (directory / "pyproject.toml").write_text(tomli_w.dumps(doc))
    return directory


def fab_hash(app: Path) -> str:
    """The SHA-256 of the bundle `flwr run` builds from the app directory (the build is
    deterministic: fixed file times and order)."""
    return hashlib.sha256(build_fab_from_disk(app)).hexdigest()


# --- the agent executor ----------------------------------------------------------------------
Handler = Callable[[Message, Context], Message]
Release = Callable[[np.ndarray, int, int], tuple[Submission, float]]


def answer_request(message: Message, dim: int, release: Release) -> Message:
    """An agent node's Flower transport: a server request in (privrl.federation.flower's
    `request_content`: θ, agent, index), `release(θ, agent, index)`'s Submission and score out,
    or, for a malformed request or a refusal (ValueError, BudgetExceededError), an Error
    REFUSED with the reason: nothing released. A batch (`batch_content`: θ and several
    (agent, index)) is answered in one message, each ask released or refused on its own, in
    the order asked (`batch_reply_content`)."""
    try:
        batch = read_batch(message.content, dim)
        if batch is not None:
            theta, asks = batch
            return Message(batch_reply_content([_release_or_why(release, theta, a, i)
                                                for a, i in asks]), reply_to=message)
        theta, agent, index = read_request(message.content, dim)
        sub, score = release(theta, agent, index)
    except (WireError, ValueError, BudgetExceededError) as e:
        return Message(Error(code=REFUSED, reason=str(e)), reply_to=message)
    return Message(submission_content(sub, score), reply_to=message)


def _release_or_why(release: Release, theta: np.ndarray, agent: int, index: int
                    ) -> tuple[Submission, float] | str:
    try:
        return release(theta, agent, index)
    except (ValueError, BudgetExceededError) as e:
        return str(e)


def refusal(message: Message, module: str) -> Message:
    """What the bundle's ClientApp answers every task with (`refusing_client_app`)."""
    return Message(Error(code=REFUSED, reason="privrl agents run only in privrl's agent "
                                              f"executor (python -m {module})"),
                   reply_to=message)


def refusing_client_app(module: str) -> ClientApp:
    """The ClientApp a bundle names. A SuperNode that runs bundles itself (Flower's default
    executor) gets this: it releases nothing. An agent computes only in privrl's agent
    executor (`python -m <module>`), which keeps its noise root, ledger and released reports
    for the whole run and runs no code from a bundle."""
    app = ClientApp()

    @app.train()
    def _refuse(message: Message, context: Context) -> Message:
        del context
        return refusal(message, module)

    return app


def serve_tasks(runtime_api: str, handle: Handler, trusted_fab: str,
                secret: bytes | None = None, should_stop: Callable[[], bool] = lambda: False,
                poll_s: float = EXECUTOR_POLL_S, idle_poll_s: float = EXECUTOR_IDLE_POLL_S,
                busy_s: float = EXECUTOR_BUSY_S) -> None:
    """Take the SuperNode's ClientApp tasks and answer each with `handle` in this process;
    a task of any other bundle than `trusted_fab` gets an error and runs nothing. `secret`:
    the SuperNode's SuperExec secret (`--superexec-auth-secret-file`), without which it hands
    its tasks to no one.

    It asks for a task every `poll_s` for `busy_s` after a task (the SuperNode takes a
    message already waiting at the SuperLink as soon as it has pushed its reply), then every
    `idle_poll_s`: a SuperNode with nothing pulls the SuperLink only every 3 s, and waits for
    an answer in steps of 0.5 s, so a task taken up to `idle_poll_s` late and answered within
    that step costs no wall time, and each ask costs both processes CPU (docs/flower.md#pace)."""
    client = _runtime_client(runtime_api, "SuperExec", secret=secret)
    last = -math.inf
    try:
        while not should_stop():
            res = client.AcquireTask(AcquireTaskRequest(
                supported_task_types=[TaskType.CLIENT_APP]))
            if res.HasField("task") and res.token:
                _run_task(runtime_api, res.token, handle, trusted_fab)
                last = time.monotonic()
            else:
                time.sleep(poll_s if time.monotonic() - last < busy_s else idle_poll_s)
    finally:
        client.close()


def executor_parser(module: str) -> Any:
    """The command line every agent executor takes (`python -m <module> ...`): its config
    file, its SuperNode's index, the SuperNodes, the SuperNode's runtime API, the pinned
    bundle hash and the SuperExec secret file."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--runtime-api", required=True)
    parser.add_argument("--trusted-fab", required=True)
    parser.add_argument("--superexec-secret-file", type=Path, default=None,
                        help="the SuperNode's --superexec-auth-secret-file")
    return parser


def superexec_secret(path: Path | None) -> bytes | None:
    return None if path is None else path.read_bytes()


def _run_task(runtime_api: str, token: str, handle: Handler, trusted_fab: str) -> None:
    client = _runtime_client(runtime_api, "flwr-clientapp", token)
    # Heartbeats only for a task that outlives HEARTBEAT_AFTER_S: flwr holds a claimed task
    # for 30 s without one, and a round's task ends well within it (one request less each).
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    started: list[bool] = []
    timer = threading.Timer(HEARTBEAT_AFTER_S,
                            lambda: (heartbeat.start(), started.append(True)))
    timer.daemon = True
    timer.start()
    try:
        message, context, _, fab = pull_task_input(client)
        if hashlib.sha256(fab.content).hexdigest() != trusted_fab:
            reply = Message(Error(code=UNTRUSTED_BUNDLE, reason=(
                f"this agent runs only the app bundle it trusts ({trusted_fab[:12]}...), "
                f"not {fab.hash_str[:12]}...")), reply_to=message)
            status, details = SubStatus.FAILED, "untrusted app bundle"
        else:
            reply, status, details = handle(message, context), SubStatus.COMPLETED, ""
        push_message(client, reply, context)
        push_task_output(client, context, status, details)
    finally:
        timer.cancel()
        timer.join()
        if started:
            heartbeat.stop()
        client.close()


def _runtime_client(address: str, component: str, token: str | None = None,
                    secret: bytes | None = None) -> Any:
    # The SuperNode's runtime API listens on the loopback interface only (its --host), so the
    # executor beside it speaks plain HTTP to it, as Flower's own executor does; taking a task
    # is signed with the SuperExec secret (HMAC), using one with the task's token.
    interceptors: list[Any] = [RuntimeVersionHttpInterceptor(component_name=component)]
    if token is not None:
        interceptors.append(RuntimeTokenHttpInterceptor(token))
    if secret is not None:
        interceptors.append(SuperExecAuthHttpInterceptor(
            master_secret=secret, protected_methods={"/flwr.proto.Runtime/AcquireTask"}))
    return RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None,
        interceptors=interceptors, retry_invoker=make_simple_http_retry_invoker())


# --- the local deployment ----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalDeployment:
    """A SuperLink and `nodes` SuperNodes on localhost with TLS and SuperNode authentication,
    each a process group of its own, all stopped when the `with` block ends (module doc).
    `logs`: where each process's output goes (kept); `startup_s`: how long the SuperLink's
    start and each `flwr` command may take (a `flwr` command took over 60 s on the shared
    2-core VM at load 35). `host`: the address the SuperLink
    serves on (its certificate's); `prefix(name)`: what a process's command line starts with
    (for example `ip netns exec NS`: benchmarks/flower_netns.py runs each SuperNode in a
    network namespace of its own)."""

    def __init__(self, nodes: int, logs: Path, startup_s: float = 300.0,
                 host: str = "127.0.0.1",
                 prefix: Callable[[str], list[str]] | None = None) -> None:
        if nodes < 1:
            raise ValueError(f"a deployment needs at least one SuperNode, got {nodes}")
        self.nodes, self.logs, self.startup_s = nodes, logs, startup_s
        self.host, self.prefix = host, prefix
        self.processes: list[subprocess.Popen] = []
        self.names: dict[int, str] = {}  # pid -> the name `spawn` gave it
        self.lost: list[int] = []  # SuperNodes (slots) that left during the run
        self.seen: set[tuple[int, float]] = set()  # (pid, start time) of their descendants
        self.bin = Path(sys.executable).parent
        self.work: Path | None = None
        self.link = f"{host}:{free_port()}"
        self.runtime_apis = [f"127.0.0.1:{free_port()}" for _ in range(nodes)]

    def __enter__(self) -> LocalDeployment:
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.track()
        stop_all(self.processes, self.seen)
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)

    def _start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="privrl-flower-"))  # 0700
        creds = make_credentials(self.work / "credentials", self.nodes, hosts=[self.host])
        # The SuperNodes' SuperExec secret: only an executor holding it may take their tasks.
        self.superexec_secret = self.work / "credentials" / "superexec.secret"
        _private(self.superexec_secret, os.urandom(32))
        home = self.work / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{self.link}"\nroot-certificates = "{creds.ca}"\n')
        self.env = process_env(home, self.bin)
        host, port = self.link.split(":")
        self.spawn("superlink", [
            "flower-superlink", "--ssl-ca-certfile", str(creds.ca), "--ssl-certfile",
            str(creds.certificate), "--ssl-keyfile", str(creds.key), "--enable-supernode-auth",
            "--disable-runtime-dependency-installation", "--host", host, "--port", port])
        self._wait_for_port(host, int(port))
        for i, (_, public) in enumerate(creds.nodes):
            self._flwr(["supernode", "register", str(public), CONNECTION, "--name",
                        f"{SLOT}{i}"], f"registering SuperNode {i}", retry=True)
        for i, (private, _) in enumerate(creds.nodes):
            self.spawn(f"supernode{i}", [
                "flower-supernode", "--superlink", self.link, "--root-certificates",
                str(creds.ca), "--auth-supernode-private-key", str(private),
                "--isolation", "process", "--host", "127.0.0.1",
                "--port", self.runtime_apis[i].split(":")[1],
                "--superexec-auth-secret-file", str(self.superexec_secret)])

    def _wait_for_port(self, host: str, port: int) -> None:
        """Until the SuperLink accepts connections (a `flwr` call costs a process start)."""
        deadline = time.monotonic() + self.startup_s
        while True:
            with socket.socket() as s:
                s.settimeout(1.0)
                if s.connect_ex((host, port)) == 0:
                    return
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                raise RuntimeError(f"the SuperLink did not start; logs in {self.logs}")
            time.sleep(0.2)

    def spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen:
        """Start `argv` (a Flower command from this environment, or any program) as a
        process group of its own, its output in logs/`name`.log."""
        argv = list(argv)
        if (self.bin / argv[0]).exists():
            argv[0] = str(self.bin / argv[0])
        if self.prefix is not None:
            argv = [*self.prefix(name), *argv]
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append(proc)
        self.names[proc.pid] = name
        return proc

    def track(self) -> None:
        """Remember the descendants of every process started (detached ones included), so
        that `stop_all` stops them after their parents are gone (one /proc scan for all)."""
        self.seen.update(descendants(*(proc.pid for proc in self.processes)))

    def check(self) -> None:
        """RuntimeError if the SuperLink has exited; a SuperNode whose `flower-supernode` or
        agent executor has exited is lost: the other is stopped and the SuperNode
        unregistered (module doc)."""
        for proc in self.processes:
            if proc.poll() is None:
                continue
            name = self.names.get(proc.pid, "")
            slot = _slot(name)
            if slot is None:
                raise RuntimeError(f"{name or proc.args[0]} exited during the run; logs in "
                                   f"{self.logs}")
            if slot not in self.lost:
                self.lose(slot)

    def lose(self, slot: int) -> None:
        """SuperNode `slot` has left: its processes stopped, it unregistered."""
        self.lost.append(slot)
        mine = [p for p in self.processes if _slot(self.names.get(p.pid, "")) == slot]
        stop_all(mine, set())
        self.processes[:] = [p for p in self.processes if p not in mine]
        said = (self.logs / f"supernode{slot}.log").read_text(errors="replace")
        node_ids = [line.rsplit(" ", 1)[-1] for line in said.splitlines()
                    if "SuperNode ID:" in line]
        if node_ids and node_ids[-1].isdigit():
            with contextlib.suppress(RuntimeError):
                self._flwr(["supernode", "unregister", node_ids[-1], CONNECTION],
                           f"unregistering SuperNode {slot}", timeout_s=30)

    def _flwr(self, args: list[str], what: str, retry: bool = False,
              timeout_s: float | None = None) -> str:
        deadline = time.monotonic() + (timeout_s or self.startup_s)
        while True:
            left = max(1.0, deadline - time.monotonic())
            try:
                out = subprocess.run([str(self.bin / "flwr"), *args], env=self.env, text=True,
                                     capture_output=True, timeout=left,
                                     stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{what} did not finish in {left:.0f} s") from None
            if out.returncode == 0:
                return out.stdout
            if not retry or time.monotonic() > deadline:
                raise RuntimeError(f"{what} failed: "
                                   + " ".join((out.stdout + out.stderr).split())[-400:])
            time.sleep(0.5)

    def submit(self, app: Path) -> str:
        """Submit the app bundle (`flwr run`); what it said."""
        return self._flwr(["run", str(app), CONNECTION], "flwr run")

    def run(self, app: Path, done: Path, timeout_s: float | None = None) -> str:
        """Submit the app bundle (`flwr run`) and wait until the ServerApp has written `done`
        (its results, or the error that ended it), or RuntimeError after `timeout_s` (None:
        no limit) or when a process of the deployment has died; what `flwr run` said."""
        said = self.submit(app)
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        next_track = 0.0
        while not done.exists():
            if time.monotonic() >= next_track:  # a /proc scan: not at every check
                self.track()
                next_track = time.monotonic() + TRACK_S
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the run did not finish in {timeout_s:g} s; logs in "
                                   f"{self.logs}")
            time.sleep(0.2)
        return said


def stop_all(processes: list[subprocess.Popen],
             seen: set[tuple[int, float]] | None = None) -> None:
    """SIGTERM to each process's group (what it started too), newest first; SIGKILL to any
    still running after GRACE_S. `seen`: (pid, start time) of their descendants found while
    they ran (`descendants`): those still running with the same start time (not a reused
    pid), in groups of their own, get the same."""
    seen = set(seen or ())
    seen.update(descendants(*(proc.pid for proc in processes)))
    for proc in reversed(processes):
        _signal(proc.pid, signal.SIGTERM)
    for pid, started in seen:
        if _started(pid) == started:
            _signal(pid, signal.SIGTERM, group=False)
    deadline = time.monotonic() + GRACE_S
    for proc in reversed(processes):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
        _signal(proc.pid, signal.SIGKILL)  # the group: children that outlived their leader
        proc.wait()
    while time.monotonic() < deadline and any(_started(p) == t for p, t in seen):
        time.sleep(0.05)
    for pid, started in seen:
        if _started(pid) == started:
            _signal(pid, signal.SIGKILL, group=False)
    processes.clear()


def descendants(*pids: int) -> set[tuple[int, float]]:
    """(pid, start time) of every descendant of the processes `pids` now running, from one
    scan of Linux's /proc (elsewhere none: a detached process is then stopped only by its own
    parent's exit)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _stat(int(entry.name))
                if stat is not None:
                    children.setdefault(int(stat[1]), []).append(int(entry.name))
    out, todo = set(), list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            started = _started(child)
            if started is not None:
                out.add((child, started))
                todo.append(child)
    return out


def _stat(pid: int) -> list[str] | None:
    """/proc/pid/stat's fields after the command name: state, ppid, ..., starttime (19)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _started(pid: int) -> float | None:
    stat = _stat(pid)
    return None if stat is None or stat[0] == "Z" else float(stat[19])


def _slot(name: str) -> int | None:
    """The SuperNode a process belongs to: supernode<i> and agent<i> (`spawn`'s names)."""
    for prefix in ("supernode", "agent"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):])
    return None


def _signal(pid: int, sig: int, group: bool = True) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)

"""Who may do what on a SASL broker: one SCRAM user per service of a deployment, and its ACLs.

``hastream up --sasl`` gives every service a login of its own and the ACLs it needs, nothing
more, so a node that misbehaves (or whose login leaks) cannot write another node's output:

- a **node replica** (``<spec>.node.<node>.r<k>``, shared by the processes of its partitions:
  ACLs are per topic, and all partitions of a replica write the same topics) reads every
  replica topic of its inputs, and reads and writes its own output topics, its restart topic
  and the heartbeat and control topics; it writes the dead-letter topic and commits offsets in
  its own consumer groups;
- the **coordinator** (``<spec>.coordinator``) reads and writes the heartbeat and control
  topics and its faust app's own topics (table changelogs, leader topic), which it may create,
  and is a member of its faust app's group;
- an **egress replica** (``<spec>.egress.<stream>.<mode>.r<k>``) reads every replica topic of its
  stream and the heartbeats, reads and writes its egress topic (it reads the committed tail to go
  on) and the control plane, and writes under its partitions' transactional ids;
- a **source** (``<spec>.source.<stream>``, what ``hastream produce`` logs in as) reads and
  writes its stream's topic (it reads the tail to continue the ids);
- the CLI's other commands (``tail``, ``status``) use the broker's admin login.

Every user may describe the groups of hastream's readers that never commit (the shared
``hastream.`` prefix of ``services.core.kafka.group_id``) and write idempotently. Topic names
come from the spec and the node plans, so they follow any change of naming there. The
functions that list users and ACLs are pure; ``provision`` applies them as the admin.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from services.coordinator.names import app_id, internal_topics
from services.core.admin import admin_client
from services.core.kafka import GROUP_PREFIX, group_id
from services.core.login import PASSWORD_ENV, PROTOCOL_ENV, USERNAME_ENV, Login, env_login
from services.core.paths import write_private
from services.spec import Spec
from services.spec.egress import egress_topic, egress_units, replicated, transactional_prefix
from services.spec.plan import plan_node
from services.spec.topics import restart_topics

ADMIN = "admin"  # the key of the broker's super user among a deployment's logins
COORDINATOR = "coordinator"
SOURCE = "source:"  # key prefix of a source stream's login
CREDENTIALS_FILE = "credentials.json"

# Operations, as confluent_kafka.admin.AclOperation names them.
READ, WRITE, DESCRIBE, CREATE, IDEMPOTENT_WRITE = "READ", "WRITE", "DESCRIBE", "CREATE", "IDEMPOTENT_WRITE"
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = "TOPIC", "GROUP", "BROKER", "TRANSACTIONAL_ID"  # ResourceType names
CLUSTER_NAME = "kafka-cluster"  # the one name of Kafka's cluster resource


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW rule: ``user`` may do ``operation`` on the named resource (or every name with that prefix)."""

    user: str
    resource: str  # TOPIC, GROUP, BROKER (the cluster) or TRANSACTIONAL_ID
    name: str
    operation: str
    prefixed: bool = False


# -- users -------------------------------------------------------------------------------
def node_key(node: str, replica: int) -> str:
    """The login key of a node replica: the role of its processes without the partition."""
    return f"{node}.r{replica}"


def source_key(spec: Spec, stream: str) -> str:
    """The login key of whoever writes ``stream``: its raw stream's writer when it has an ingress."""
    raw = spec.raw_of(stream)
    return SOURCE + (raw.name if raw is not None else stream)


def usernames(spec: Spec) -> dict[str, str]:
    """Login key -> SCRAM user name, for every service of the deployment of ``spec``."""
    users = {COORDINATOR: f"{spec.name}.coordinator"}
    for node, nd in spec.nodes.items():
        for r in range(nd.replicas):
            users[node_key(node, r)] = f"{spec.name}.node.{node}.r{r}"
    for name, (stream, e) in egress_units(spec).items():
        for r in range(e.replicas):
            users[node_key(name, r)] = f"{spec.name}.egress.{stream}.{e.mode}.r{r}"
    for stream in spec.sources():
        users[SOURCE + stream] = f"{spec.name}.source.{stream}"
    return users


def login_key(spec: Spec, role: str) -> str:
    """The login key of a process of ``hastream up`` by its role (``coordinator``, ``<node>.r<k>[.p<i>]``)."""
    if role == COORDINATOR:
        return COORDINATOR
    for node, replicas, partitions in replicated(spec):
        for r in range(replicas):
            key = node_key(node, r)
            if role == key or any(role == f"{key}.p{p}" for p in range(partitions)):
                return key
    raise LookupError(f"no service '{role}' in spec '{spec.name}'")


# -- ACLs --------------------------------------------------------------------------------
def _topic(user: str, topics: list[str], *operations: str) -> list[Acl]:
    return [Acl(user, TOPIC, t, op) for t in topics for op in operations]


def _common(user: str) -> list[Acl]:
    """What every service does: read with hastream's non-committing readers, write idempotently."""
    return [Acl(user, GROUP, GROUP_PREFIX, DESCRIBE, prefixed=True), Acl(user, CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE)]


def node_acls(spec: Spec, node: str, replica: int) -> list[Acl]:
    """A node replica reads its inputs, keeps its own logs and speaks on the control plane; nothing else."""
    user = usernames(spec)[node_key(node, replica)]
    plan = plan_node(spec, node)
    inputs = [t for i in plan.inputs for t in i.topics]
    ticked = [t for i in plan.inputs if i.ingress is not None for t in i.topics]  # an idle raw topic's ticks
    own = [o.topics[replica] for o in plan.outputs]
    restart = [t for t, _ in restart_topics(spec) if t == plan.restart_topics[replica]]
    groups = [group_id(plan.service_name(replica, p)) for p in range(plan.partitions)]
    return [
        *_topic(user, inputs, READ),
        *_topic(user, [*own, *restart, plan.heartbeat_topic, plan.control_topic], READ, WRITE),
        *_topic(user, [plan.deadletter_topic, *ticked], WRITE),
        *[Acl(user, GROUP, g, READ) for g in groups],
        *_common(user),
    ]


def coordinator_acls(spec: Spec) -> list[Acl]:
    """The coordinator follows and writes the control plane and keeps its faust tables."""
    user = usernames(spec)[COORDINATOR]
    return [
        *_topic(user, [spec.heartbeat_topic, spec.control_topic], READ, WRITE),
        *_topic(user, internal_topics(spec), READ, WRITE, CREATE),
        Acl(user, GROUP, app_id(spec), READ),
        *_common(user),
    ]


def egress_acls(spec: Spec, name: str, replica: int) -> list[Acl]:
    """An egress replica follows its stream as a client does and writes its topic in transactions."""
    user = usernames(spec)[node_key(name, replica)]
    stream, e = egress_units(spec)[name]
    ids = transactional_prefix(spec, stream, e)
    return [
        *_topic(user, spec.readable_topics(stream), READ),
        *_topic(user, [egress_topic(spec, stream, e), spec.heartbeat_topic, spec.control_topic], READ, WRITE),
        *[Acl(user, TRANSACTIONAL_ID, ids, op, prefixed=True) for op in (WRITE, DESCRIBE)],
        *_common(user),
    ]


def source_acls(spec: Spec, stream: str) -> list[Acl]:
    """A source reads its stream's tail (to continue the ids) and writes the stream."""
    user = usernames(spec)[SOURCE + stream]
    return [*_topic(user, [spec.topic(stream)], READ, WRITE), *_common(user)]


def spec_acls(spec: Spec) -> list[Acl]:
    """Every ACL of the deployment of ``spec``, sorted."""
    acls = coordinator_acls(spec)
    for node, nd in spec.nodes.items():
        for r in range(nd.replicas):
            acls += node_acls(spec, node, r)
    for name, (_, e) in egress_units(spec).items():
        for r in range(e.replicas):
            acls += egress_acls(spec, name, r)
    for stream in spec.sources():
        acls += source_acls(spec, stream)
    return sorted(set(acls))


# -- the deployment's logins -------------------------------------------------------------
def new_logins(spec: Spec, admin: Login) -> dict[str, Login]:
    """A fresh password for every user of ``spec``, and the admin's login (for the CLI)."""
    logins = {k: Login(u, secrets.token_urlsafe(24), admin.protocol) for k, u in usernames(spec).items()}
    return {ADMIN: admin, **logins}


def save_logins(folder: Path, logins: dict[str, Login]) -> None:
    """Keep the logins in ``folder`` where only this user can read them (mode 0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_private(folder / CREDENTIALS_FILE, json.dumps({k: asdict(v) for k, v in logins.items()}, indent=2))


def load_logins(folder: Path) -> dict[str, Login]:
    """The logins ``save_logins`` kept in ``folder`` (none for a deployment without SASL)."""
    try:
        stored = json.loads((folder / CREDENTIALS_FILE).read_text())
    except FileNotFoundError:
        return {}
    return {k: Login(**v) for k, v in stored.items()}


def login_env(login: Login | None) -> dict[str, str]:
    """A process environment's login variables: ``login``'s, or empty ones that clear an inherited login."""
    return login.env() if login is not None else {USERNAME_ENV: "", PASSWORD_ENV: "", PROTOCOL_ENV: ""}


@contextlib.contextmanager
def acting_as(login: Login | None) -> Iterator[None]:
    """Build this process's Kafka clients with ``login`` within the block (they read the environment);
    None changes nothing."""
    if login is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in login.env()}
    os.environ.update(login.env())
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- applying them -----------------------------------------------------------------------
def provision(spec: Spec, bootstrap: str, logins: dict[str, Login], timeout: float = 30) -> None:
    """Create (or reset the passwords of) the users and create the ACLs, as the admin; returns once
    the broker holds them all, so services started next are neither refused nor denied."""
    users = [v for k, v in logins.items() if k != ADMIN]
    acls = spec_acls(spec)
    with acting_as(logins[ADMIN]):
        admin = admin_client(bootstrap)
        _upsert_users(admin, users, timeout)
        for fut in admin.create_acls(bindings(acls), request_timeout=timeout).values():
            fut.result()
        _await(lambda: _missing(admin, users, acls, timeout), timeout)


def _upsert_users(admin: AdminClient, logins: list[Login], timeout: float) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upserts = [UserScramCredentialUpsertion(login.username, info, login.password.encode()) for login in logins]
    for fut in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():  # type: ignore[arg-type]
        fut.result()


def bindings(acls: list[Acl]) -> list[AclBinding]:
    """The ACLs as the admin client takes them (principal ``User:<name>``, any host)."""
    return [
        AclBinding(
            ResourceType[a.resource],
            a.name,
            ResourcePatternType.PREFIXED if a.prefixed else ResourcePatternType.LITERAL,
            f"User:{a.user}",
            "*",
            AclOperation[a.operation],
            AclPermissionType.ALLOW,
        )
        for a in acls
    ]


def _missing(admin: AdminClient, users: list[Login], acls: list[Acl], timeout: float) -> str | None:
    """What the broker does not hold yet of the users and ACLs (they reach it through the metadata log)."""
    anything = cast(str, None)  # a filter's None matches any name, principal and host
    every = AclBindingFilter(
        ResourceType.ANY, anything, ResourcePatternType.ANY, anything, anything, AclOperation.ANY, AclPermissionType.ANY
    )
    held = set(map(str, admin.describe_acls(every, request_timeout=timeout).result()))
    acls_missing = len(set(map(str, bindings(acls))) - held)
    if acls_missing:
        return f"{acls_missing} ACLs"
    names = [u.username for u in users]
    described = cast(dict[str, Future], admin.describe_user_scram_credentials(names, request_timeout=timeout))
    for name, fut in described.items():
        try:
            fut.result()
        except Exception:
            return f"the user '{name}'"
    return None


def _await(missing: Callable[[], str | None], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (what := missing()) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Kafka broker did not hold {what} of the deployment within {timeout:g}s")
        time.sleep(0.1)


# -- docker compose ----------------------------------------------------------------------
PASSWORD_VAR_PREFIX = "HASTREAM_PASSWORD_"


def password_var(key: str) -> str:
    """The variable that holds login ``key``'s password in compose's ``.env`` (``ingest.r0`` ->
    ``HASTREAM_PASSWORD_INGEST_R0``, the admin's ``HASTREAM_PASSWORD_ADMIN``)."""
    return PASSWORD_VAR_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def compose_passwords(spec: Spec, kept: Mapping[str, str]) -> dict[str, str]:
    """The ``.env`` of docker-compose.sasl.yml: a password per login of ``spec`` and the admin's,
    those in ``kept`` unchanged (the admin's is in the broker's storage since it was formatted)."""
    keys = [ADMIN, *usernames(spec)]
    out = {password_var(k): kept.get(password_var(k)) or secrets.token_urlsafe(24) for k in keys}
    if len(out) != len(keys):
        raise ValueError("two logins of the spec map to one password variable: rename a node or stream")
    return out


def compose_logins(spec: Spec, environ: Mapping[str, str]) -> dict[str, Login]:
    """The logins a compose service that provisions them finds in its environment: the admin's
    (``$HASTREAM_SASL_USERNAME``/``PASSWORD``) and every user's ``password_var``."""
    admin = env_login(environ)
    if admin is None:
        raise ValueError(f"no admin login: set {USERNAME_ENV} and {PASSWORD_ENV}")
    missing = [password_var(k) for k in usernames(spec) if not environ.get(password_var(k))]
    if missing:
        raise ValueError(f"no password in {', '.join(missing)}: run 'hastream logins' for this spec")
    users = {k: Login(u, environ[password_var(k)], admin.protocol) for k, u in usernames(spec).items()}
    return {ADMIN: admin, **users}


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """Set ``values`` in the ``KEY=value`` file ``path``, keeping its other lines, readable by
    this user only (mode 0600): it holds passwords."""
    lines = path.read_text().splitlines() if path.exists() else []
    todo = dict(values)
    for i, line in enumerate(lines):
        key = line.split("=", 1)[0].strip()
        if key in todo:
            lines[i] = f"{key}={todo.pop(key)}"
    lines += [f"{k}={v}" for k, v in todo.items()]
    write_private(path, "".join(f"{line}\n" for line in lines))


def read_env_file(path: Path) -> dict[str, str]:
    """The ``KEY=value`` lines of ``path`` (none if it does not exist)."""
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}

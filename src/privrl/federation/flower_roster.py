"""A fleet roster: SuperNodes that prove who they are to each other, not to the server.

Flower 1.42's SecAgg+ lets a node take its peers' keys on the server's word: the SHARE_KEYS
request lists each peer's two public keys (pk1 for the pairwise masks, pk2 to encrypt the key
shares). A server that runs the SuperLink can list SuperNodes of its own, or replace an honest
node's pk2 by one it holds; each node then hands the server its shares, and with a threshold's
worth of them the server unmasks that node's message alone (docs/threat-model.md).

Here each SuperNode has an identity key (Ed25519, in its own directory, mode 0600), and
whoever deploys the agents hands every node the same roster: the identities' public keys, out
of band (a file; never through the server). At SETUP a node signs its fresh SecAgg+ keys, with
the run, the round (Flower's group id) and the node id it was addressed as, and sends the
signature inside its pk2 (`seal`); Flower's server workflow forwards pk2 as opaque bytes (it
reads only pk1). At SHARE_KEYS a node accepts a peer only if its keys carry a valid signature
by a roster identity, for that run, round and node id, and no identity stands for two nodes
(`unseal`). So every peer a node shares with is a roster node holding the keys it signed.
The keys are fresh for each SETUP, so a replayed signature names keys whose secrets only the
node that made them ever held (and that node drops them at its next SETUP).

A node operator makes (once) and prints its identity's public key with
`python -m privrl.federation.flower_roster identity DIR` (DIR: the node's own directory, its
--state-dir); the deployer writes the roster of the keys it collected with
`python -m privrl.federation.flower_roster roster FILE KEY...` and gives every node the file.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

__all__ = ["IDENTITY_FILE", "MAGIC", "NodeIdentity", "Roster", "RosterError", "seal",
           "unseal", "write_roster"]

IDENTITY_FILE = "identity.key"  # a node's Ed25519 private key (raw 32 bytes), mode 0600
MAGIC = b"privrl-roster-v1"  # marks a sealed pk2: pk2 + MAGIC + identity (32) + signature (64)
_TAIL = len(MAGIC) + 32 + 64
_MAX_ROSTER = 4096  # SuperNodes a roster may name (a bound on what a node parses)


class RosterError(ValueError):
    """A peer's keys that are not a roster node's, or a roster file that cannot be one."""


def _statement(run_id: int, group: str, node_id: int, pk1: bytes, pk2: bytes) -> bytes:
    """What a node signs: its SecAgg+ keys for this run, round and node id, each field
    length-prefixed so that no two statements read alike."""
    out = bytearray(b"privrl secagg+ keys\0")
    for part in (run_id.to_bytes(8, "big"), group.encode(), node_id.to_bytes(8, "big"),
                 pk1, pk2):
        out += len(part).to_bytes(4, "big") + part
    return bytes(out)


def _id_int(v: int, what: str) -> int:
    if type(v) is not int or not 0 <= v < 1 << 64:
        raise RosterError(f"{what} {v!r} is not a 64-bit unsigned integer")
    return v


class NodeIdentity:
    """A SuperNode's identity key. `load_or_create(directory)`: the node's own key file,
    made (mode 0600, never overwritten) the first time."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public = key.public_key().public_bytes(serialization.Encoding.Raw,
                                                    serialization.PublicFormat.Raw)

    @classmethod
    def generate(cls) -> NodeIdentity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, directory: Path) -> NodeIdentity:
        path = Path(directory) / IDENTITY_FILE
        if not path.exists():
            raw = Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                serialization.NoEncryption())
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_mode & 0o077:
                raise RosterError(f"{path}: an identity key must be mode 0600 (it is "
                                  f"{st.st_mode & 0o777:o})")
            raw = f.read(33)
        if len(raw) != 32:
            raise RosterError(f"{path}: not a 32-byte Ed25519 private key")
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)


@dataclass(frozen=True)
class Roster:
    """The identities (Ed25519 public keys, 32 bytes each) of the SuperNodes that may take
    part in a secure sum, as whoever deploys the agents hands them to every node."""

    keys: frozenset[bytes]

    def __post_init__(self) -> None:
        if not self.keys or any(len(k) != 32 for k in self.keys):
            raise RosterError("a roster names >= 1 Ed25519 public keys of 32 bytes")

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def read(cls, path: Path) -> Roster:
        """A roster file: JSON {"supernodes": [hex public key, ...]}, distinct keys."""
        path = Path(path)
        try:
            with path.open("rb") as f:
                text = f.read(_MAX_ROSTER * 80 + 1024)
            hexes = json.loads(text)["supernodes"]
            if not isinstance(hexes, list) or not 1 <= len(hexes) <= _MAX_ROSTER \
                    or not all(isinstance(h, str) and len(h) == 64 for h in hexes):
                raise ValueError("'supernodes' must list 1 to "
                                 f"{_MAX_ROSTER} hex keys of 64 digits")
            keys = [bytes.fromhex(h) for h in hexes]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RosterError(f"{path}: not a roster ({type(e).__name__}: {e})") from None
        if len(set(keys)) != len(keys):
            raise RosterError(f"{path}: a SuperNode is listed twice")
        return cls(frozenset(keys))


def write_roster(path: Path, identities: list[bytes]) -> None:
    """The roster file of these identities' public keys (`Roster.read` reads it)."""
    Path(path).write_text(json.dumps({"supernodes": [k.hex() for k in identities]}))


def seal(identity: NodeIdentity, run_id: int, group: str, node_id: int, pk1: bytes,
         pk2: bytes) -> bytes:
    """pk2 as the node sends it at SETUP: pk2 + MAGIC + its identity + its signature of the
    statement (module doc)."""
    sig = identity.sign(_statement(_id_int(run_id, "run id"), group,
                                   _id_int(node_id, "node id"), pk1, pk2))
    return pk2 + MAGIC + identity.public + sig


def unseal(roster: Roster, run_id: int, group: str, keys: dict[int, tuple[bytes, bytes]]
           ) -> dict[int, tuple[bytes, bytes]]:
    """The peers' (pk1, pk2) with their seals removed, if every peer's keys are signed by a
    distinct roster identity for this run, round and its node id; RosterError otherwise."""
    seen: dict[bytes, int] = {}
    out: dict[int, tuple[bytes, bytes]] = {}
    for nid, (pk1, sealed) in keys.items():
        if len(sealed) <= _TAIL or sealed[-_TAIL:-96] != MAGIC:
            raise RosterError(f"node {nid}'s keys carry no roster signature")
        pk2, who, sig = sealed[:-_TAIL], sealed[-96:-64], sealed[-64:]
        if who not in roster.keys:
            raise RosterError(f"node {nid} signs with an identity not on the roster")
        if who in seen:
            raise RosterError(f"nodes {seen[who]} and {nid} sign with one identity")
        try:
            Ed25519PublicKey.from_public_bytes(who).verify(
                sig, _statement(_id_int(run_id, "run id"), group, _id_int(nid, "node id"),
                                pk1, pk2))
        except InvalidSignature:
            raise RosterError(f"node {nid}'s keys are not the ones its identity signed "
                              "(for this run, round and node id)") from None
        seen[who] = nid
        out[nid] = (pk1, pk2)
    return out


def main(argv: list[str] | None = None) -> None:
    """`identity DIR`: print the identity public key of the node whose own directory is DIR
    (made, mode 0600, if missing); `roster FILE KEY...`: write the roster of these keys."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m privrl.federation.flower_roster")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("identity").add_argument("directory", type=Path)
    out = sub.add_parser("roster")
    out.add_argument("file", type=Path)
    out.add_argument("keys", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "identity":
        print(NodeIdentity.load_or_create(args.directory).public.hex())
        return
    try:
        keys = [bytes.fromhex(k) for k in args.keys]
        Roster(frozenset(keys))
    except (ValueError, RosterError) as e:
        parser.error(f"KEY: 64 hex digits each ({e})")
    if len(set(keys)) != len(keys):
        parser.error("KEY: a SuperNode is listed twice")
    write_roster(args.file, keys)
    print(f"{args.file}: {len(keys)} SuperNodes", file=sys.stderr)


if __name__ == "__main__":
    main()

"""What the watches have seen, kept in memory, so that admission and repair read no lists.

Each store is fed by a watch (kube/informer.py, started by handlers/engine.py, which lists every kind
before any handler runs, so no handler decides from a partial picture), by the DELETED events, and by the
answers to the operator's own writes (a decision sees what was just written before its watch event
arrives). A body is replaced only by a newer resourceVersion; a deleted object's uid is remembered for a
while, so a late answer cannot bring it back. A deletion lost in a watch gap is the watch's to find: it
lists again and hands on what the listing no longer shows (kube/informer.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from gymsandbox.desired.owner import Manifest, template_hash

# How long a deleted object's uid is remembered (a write answered after its deletion is ignored).
TOMBSTONE_SECONDS = 600.0

Key = tuple[str, str]  # namespace, name


POD_SPEC_KEPT = frozenset({"nodeName", "readinessGates"})
# The strings the stores share one copy of: keys, and values up to WORD_CHARS (names, uids, timestamps,
# labels, condition words; a lease token is longer). The table is emptied when it holds VOCABULARY_WORDS.
WORD_CHARS = 64
VOCABULARY_WORDS = 65_536


class Vocabulary:
    """One copy of each short string the stores hold. Every watch event and write answer is decoded on its
    own, so without it each stored object carries its own copies of the same keys ("metadata", "status"),
    namespace, labels, owner uid and timestamps: about a third of a store's memory. Bounded: emptied when
    full (what is stored keeps its strings; later objects share anew)."""

    def __init__(self, limit: int = VOCABULARY_WORDS) -> None:
        self._limit = limit
        self._words: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._words)

    def compact(self, value: Any) -> Any:
        """`value` rebuilt with its dicts' keys and short strings taken from the table."""
        if isinstance(value, dict):
            return {self._word(k): self.compact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.compact(v) for v in value]
        if isinstance(value, str) and len(value) <= WORD_CHARS:
            return self._word(value)
        return value

    def _word(self, word: str) -> str:
        if len(self._words) >= self._limit:
            self._words.clear()
        return self._words.setdefault(word, word)


VOCABULARY = Vocabulary()  # shared: a child's ownerReferences repeat its episode's uid and name


def slim(body: Mapping[str, Any]) -> Manifest:
    """The object without its managedFields (most of its size, and read by nobody here); a body that has
    none is returned as it is (slimmed already: the watches slim each event once, the store again)."""
    metadata = body.get("metadata") or {}
    if "managedFields" not in metadata:
        return cast(Manifest, body)
    meta = {k: v for k, v in metadata.items() if k != "managedFields"}
    return {**body, "metadata": meta}


def slim_pod(body: Mapping[str, Any]) -> Manifest:
    """A pod as the operator reads it: its metadata, status, node and readiness gates (its containers and
    volumes are most of the rest, and are read from the episode instead)."""
    pod = slim(body)
    spec = body.get("spec") or {}
    if POD_SPEC_KEPT.issuperset(spec):
        return pod
    return {**pod, "spec": {key: spec[key] for key in POD_SPEC_KEPT if key in spec}}


def slim_secret(body: Mapping[str, Any]) -> Manifest:
    """A lease Secret as the drift pass reads it: its metadata and its data (the token), nothing else."""
    secret = slim(body)
    return {"metadata": secret["metadata"], "data": dict(body.get("data") or {})}


def slim_network_policy(body: Mapping[str, Any]) -> Manifest:
    """An episode's NetworkPolicy as the drift pass reads it: its metadata and its spec's digest (compared
    with the digest it was made with, TEMPLATE_HASH_ANNOTATION), not the spec itself."""
    if "specDigest" in body:
        return cast(Manifest, body)
    return {"metadata": slim(body)["metadata"], "specDigest": template_hash(body.get("spec"))}


def newer(candidate: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """resourceVersions are etcd revisions; an unparsable one is taken as newer (the API server's word)."""
    a, b = candidate["metadata"].get("resourceVersion"), current["metadata"].get("resourceVersion")
    try:
        return int(a) >= int(b)
    except (TypeError, ValueError):
        return True


class Store:
    """Objects of one kind by (namespace, name), and by a group key (for episodes: their host); `keep` says
    what of each object is held (and is all that the watches hand on, kube/informer.py)."""

    def __init__(
        self,
        group_of: Callable[[Mapping[str, Any]], str | None] = lambda _: None,
        keep: Callable[[Mapping[str, Any]], Manifest] = slim,
    ) -> None:
        self._group_of = group_of
        self.keep = keep
        self._lock = threading.Lock()
        self._objects: dict[Key, Manifest] = {}
        self._seen: dict[Key, float] = {}  # when each body was put, monotonic
        self._groups: dict[Key, set[str]] = {}  # (namespace, group) -> names
        self._tombstones: dict[str, float] = {}  # uid -> when its deletion was seen

    def put(self, body: Mapping[str, Any] | None) -> None:
        if not body or not (body.get("metadata") or {}).get("name"):
            return
        meta = body["metadata"]
        key = (str(meta.get("namespace") or ""), str(meta["name"]))
        with self._lock:
            if self._held_already(key, meta):
                return
        obj = VOCABULARY.compact(self.keep(body))
        meta = obj["metadata"]
        with self._lock:
            if meta.get("uid") in self._tombstones:
                return
            current = self._objects.get(key)
            same = current is not None and current["metadata"].get("uid") == meta.get("uid")
            if same and current is not None and not newer(obj, current):
                return
            self._unlink(key)
            self._objects[key] = obj
            self._seen[key] = time.monotonic()
            group = self._group_of(obj)
            if group is not None:
                self._groups.setdefault((key[0], group), set()).add(key[1])

    def remove(self, body: Mapping[str, Any]) -> None:
        """The object was deleted: forget it, and ignore any later answer about it."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name")))
        moment = time.monotonic()
        with self._lock:
            if meta.get("uid"):
                self._tombstones[str(meta["uid"])] = moment
            current = self._objects.get(key)
            if current is not None and current["metadata"].get("uid") in (meta.get("uid"), None):
                self._unlink(key)
            for uid in [u for u, t in self._tombstones.items() if moment - t > TOMBSTONE_SECONDS]:
                del self._tombstones[uid]

    def get(self, namespace: str, name: str) -> Manifest | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def age(self, namespace: str, name: str) -> float | None:
        """Seconds since the object was last put; None when it is not here."""
        with self._lock:
            seen = self._seen.get((namespace, name))
        return None if seen is None else time.monotonic() - seen

    def group(self, namespace: str, group: str) -> list[Manifest]:
        with self._lock:
            names = self._groups.get((namespace, group), set())
            return [self._objects[(namespace, n)] for n in sorted(names)]

    def in_namespace(self, namespace: str | None) -> list[Manifest]:
        """The objects of one namespace (None: of all)."""
        with self._lock:
            return [obj for (ns, _), obj in sorted(self._objects.items()) if namespace in (None, ns)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def _held_already(self, key: Key, meta: Mapping[str, Any]) -> bool:
        """This very version is held (a write's answer, then its watch event): only when it was last put
        moves, and it is not decoded into the store again."""
        current = self._objects.get(key)
        if current is None or not meta.get("resourceVersion"):
            return False
        held = current["metadata"]
        if (held.get("uid"), held.get("resourceVersion")) != (meta.get("uid"), meta.get("resourceVersion")):
            return False
        self._seen[key] = time.monotonic()
        return True

    def _unlink(self, key: Key) -> None:
        current = self._objects.pop(key, None)
        self._seen.pop(key, None)
        if current is None:
            return
        group = self._group_of(current)
        if group is not None:
            names = self._groups.get((key[0], group))
            if names is not None:
                names.discard(key[1])
                if not names:
                    del self._groups[(key[0], group)]

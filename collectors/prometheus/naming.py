"""How the Prometheus wing names a target, written once (the live source and the history reader share it).

A configured target's name when its URL's host:port is the series' ``instance``; otherwise the instance
itself, or ``job/instance`` when one instance serves several jobs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol, TypeVar
from urllib.parse import urlsplit

from config import Target


class _Keyed(Protocol):
    @property
    def instance(self) -> str: ...
    @property
    def job(self) -> str: ...


K = TypeVar("K", bound=_Keyed)


class TargetKey(NamedTuple):
    """A target as Prometheus names it. A tuple: a cycle of 1,000 targets hashes and compares it ~100,000
    times as a dict key, in C (a dataclass's generated ``__hash__``/``__eq__`` cost a third of the cycle)."""

    instance: str
    job: str

    @classmethod
    def of(cls, labels: Mapping[str, str]) -> TargetKey:
        return cls(labels.get("instance", ""), labels.get("job", ""))


def instance_of_url(url: str) -> str:
    """The ``instance`` label Prometheus gives a target scraped at ``url``: its host:port."""
    return urlsplit(url).netloc


def by_instance(targets: Iterable[Target]) -> dict[str, Target]:
    """Configured targets by the instance Prometheus would label them with."""
    return {instance_of_url(t.url): t for t in targets}


def target_names(keys: Iterable[K], configured: Mapping[str, Target]) -> dict[K, str]:
    """The name of every (instance, job) key, as the Prometheus source shows it."""
    keys = list(keys)
    jobs_per_instance: dict[str, int] = {}
    for key in keys:
        jobs_per_instance[key.instance] = jobs_per_instance.get(key.instance, 0) + 1
    names: dict[K, str] = {}
    for key in keys:
        target = configured.get(key.instance)
        if target is not None:
            names[key] = target.name
        elif jobs_per_instance[key.instance] > 1:
            names[key] = f"{key.job}/{key.instance}"
        else:
            names[key] = key.instance
    return names


def instance_of_name(name: str, targets: Iterable[Target]) -> str:
    """The instance a target name stands for: the reverse of ``target_names``."""
    for target in targets:
        if target.name == name:
            return instance_of_url(target.url)
    return name.split("/", 1)[1] if "/" in name else name  # "job/instance" when jobs share an instance


def instances_matcher(instances: Iterable[str]) -> str:
    """``instance=~"a|b"``: the matcher narrowing a query to these instances (sorted, each escaped: PromQL
    regexes are RE2 in double-quoted strings, so regex metacharacters, then the string's quotes)."""
    escaped = (re.escape(i).replace("\\", "\\\\").replace('"', '\\"') for i in sorted(set(instances)))
    return f'instance=~"{"|".join(escaped)}"'

"""Simulated SGLang 0.5.23 fleet (Kimi-K3 + DSpark) that speaks the monitoring API and behaves by the seed.

``SimFleet`` serves scenarios over HTTP on 127.0.0.1; ``synthesize_history`` samples the same mechanism into
``collectors.model`` snapshots without HTTP. Imports only ``config`` and ``collectors.model`` from the
project.
"""

from sim.fleet import SimFleet, start_fleet
from sim.sampler import synthesize_history
from sim.server import SimServer

__all__ = ["SimFleet", "SimServer", "start_fleet", "synthesize_history"]

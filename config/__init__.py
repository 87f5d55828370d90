"""Fleet configuration: typed, frozen settings loaded from YAML and validated at start.

Every setting is declared once (``config.settings``) with a default and a one-line help text; a bad file
raises ``ConfigError`` naming the file, the key, what was expected and what was found.
"""

from config.errors import ConfigError
from config.loader import load_config, load_targets_file, parse_config
from config.settings import (
    AlertSettings,
    Config,
    DashboardSettings,
    DeliverySettings,
    ExporterSettings,
    ProbeSettings,
    PrometheusSettings,
    ScrapeSettings,
    SimSettings,
    StoreSettings,
    Target,
)

__all__ = [
    "AlertSettings",
    "Config",
    "ConfigError",
    "DashboardSettings",
    "DeliverySettings",
    "ExporterSettings",
    "ProbeSettings",
    "PrometheusSettings",
    "ScrapeSettings",
    "SimSettings",
    "StoreSettings",
    "Target",
    "load_config",
    "load_targets_file",
    "parse_config",
]

"""Fleet configuration: typed, frozen settings loaded from YAML and validated at start.

Every setting is declared once (``config.settings``) with a default and a one-line help text; a bad file
raises ``ConfigError`` naming the file, the key, what was expected and what was found.
"""

from config.errors import ConfigError
from config.loader import check_no_clash, load_config, load_targets_file, parse_config
from config.settings import (
    AlertSettings,
    BurnWindowSettings,
    Config,
    CostSettings,
    DashboardSettings,
    DeliverySettings,
    ExporterSettings,
    ProbeSettings,
    PrometheusSettings,
    ScrapeSettings,
    SimSettings,
    SliSettings,
    SloAlertingSettings,
    SloSettings,
    StoreSettings,
    Target,
    parse_duration_s,
)

__all__ = [
    "AlertSettings",
    "BurnWindowSettings",
    "Config",
    "ConfigError",
    "CostSettings",
    "DashboardSettings",
    "DeliverySettings",
    "ExporterSettings",
    "ProbeSettings",
    "PrometheusSettings",
    "ScrapeSettings",
    "SimSettings",
    "SliSettings",
    "SloAlertingSettings",
    "SloSettings",
    "StoreSettings",
    "Target",
    "check_no_clash",
    "load_config",
    "load_targets_file",
    "parse_config",
    "parse_duration_s",
]

"""Allocation policies (decide every round what every job holds); importing this package registers them."""

from . import cedla as _cedla  # noqa: F401
from . import eaco as _eaco  # noqa: F401
from . import gandiva as _gandiva  # noqa: F401
from . import gavel_fifo as _gavel_fifo  # noqa: F401
from . import green as _green  # noqa: F401
from . import hkbu_dag as _hkbu_dag  # noqa: F401
from . import hkbu_dvfs as _hkbu_dvfs  # noqa: F401
from . import hkbu_online_pd as _hkbu_online_pd  # noqa: F401
from . import optimus as _optimus  # noqa: F401
from . import powerflow as _powerflow  # noqa: F401
from . import tiresias as _tiresias  # noqa: F401
from . import zeus as _zeus  # noqa: F401

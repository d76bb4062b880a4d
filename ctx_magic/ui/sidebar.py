"""The sidebar anchor: a small widget whose JupyterLab view moves the context panel
into the right sidebar and follows the active notebook. Its front end is the project's own
labextension (`labextension/`, module `@ctx-magic/labextension`)."""

from __future__ import annotations

import ipywidgets as widgets
from traitlets import Instance, Unicode

from ctx_magic.ui.panel import ContextPanel

MODULE = "@ctx-magic/labextension"
MODULE_VERSION = "^0.1.0"


class SidebarAnchor(widgets.DOMWidget):
    """Shown in a cell; in JupyterLab its view puts `panel` in the right sidebar."""

    _model_name = Unicode("SidebarAnchorModel").tag(sync=True)
    _model_module = Unicode(MODULE).tag(sync=True)
    _model_module_version = Unicode(MODULE_VERSION).tag(sync=True)
    _view_name = Unicode("SidebarAnchorView").tag(sync=True)
    _view_module = Unicode(MODULE).tag(sync=True)
    _view_module_version = Unicode(MODULE_VERSION).tag(sync=True)

    panel = Instance(ContextPanel).tag(sync=True, **widgets.widget_serialization)
    title = Unicode("Agent context").tag(sync=True)

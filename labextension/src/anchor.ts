import {
  DOMWidgetModel,
  DOMWidgetView,
  ISerializers,
  unpack_models
} from '@jupyter-widgets/base';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { ContextSidebar } from './sidebar';
import { MODULE_NAME, MODULE_VERSION } from './version';

/** What an anchor view needs from JupyterLab; absent in a frontend without a notebook shell. */
export interface ISidebarHost {
  readonly sidebar: ContextSidebar;
  /** The notebook a view was rendered for, or null (a console, an output view elsewhere). */
  notebookOf(view: DOMWidgetView): Promise<NotebookPanel | null>;
  /** Open the sidebar: always when asked (`force`), else only the first time a panel arrives. */
  reveal(force: boolean): void;
}

let host: ISidebarHost | null = null;

/** Called once by the plugin; until then (or without a shell) anchors render the panel inline. */
export function setSidebarHost(value: ISidebarHost | null): void {
  host = value;
}

/** The model of ctx_magic.ui.sidebar.SidebarAnchor: `panel` arrives as "IPY_MODEL_<id>". */
export class SidebarAnchorModel extends DOMWidgetModel {
  defaults(): Backbone.ObjectHash {
    return {
      ...super.defaults(),
      _model_name: 'SidebarAnchorModel',
      _model_module: MODULE_NAME,
      _model_module_version: MODULE_VERSION,
      _view_name: 'SidebarAnchorView',
      _view_module: MODULE_NAME,
      _view_module_version: MODULE_VERSION,
      panel: null,
      title: 'Agent context'
    };
  }

  static serializers: ISerializers = {
    ...DOMWidgetModel.serializers,
    panel: { deserialize: unpack_models }
  };
}

/**
 * In a notebook cell: one line pointing at the sidebar, while the panel's own view lives in the
 * sidebar container of that notebook. Anywhere else: the panel itself, inline.
 */
export class SidebarAnchorView extends DOMWidgetView {
  render(): void {
    this.el.classList.add('ctx-magic-anchor');
    this.listenTo(this.model, 'change:panel', () => void this._show());
    void this._show();
  }

  remove(): void {
    this._removed = true;
    // An inline panel belongs to this cell output; a sidebar panel outlives it on purpose (the
    // session goes on after the output is cleared) until a newer anchor or the notebook replaces it.
    this._inline?.remove();
    this._inline = null;
    super.remove();
  }

  private async _show(): Promise<void> {
    const panel = this.model.get('panel') as DOMWidgetModel | null;
    if (!panel) {
      return;
    }
    const notebook = host ? await host.notebookOf(this) : null;
    const view = await this.create_child_view<DOMWidgetView>(panel);
    if (this._removed) {
      view.remove();
      return;
    }
    if (host && notebook) {
      this._inline?.remove();
      this._inline = null;
      this._showLink(host);
      host.sidebar.place(notebook, view);
      host.reveal(false);
    } else {
      this._showInline(view);
    }
  }

  private _showLink(sidebarHost: ISidebarHost): void {
    const link = document.createElement('button');
    link.className = 'ctx-magic-anchor-link';
    link.textContent = `${this.model.get('title') || 'Agent context'} is in the right sidebar ›`;
    link.title = 'Show the agent context panel';
    link.addEventListener('click', () => sidebarHost.reveal(true));
    this.el.replaceChildren(link);
  }

  private _showInline(view: DOMWidgetView): void {
    this._inline?.remove();
    this._inline = view;
    this.el.replaceChildren();
    // The anchor's Lumino widget has no layout for children, so the panel is attached as a root
    // widget into the anchor's node once that node is in the page (Lumino requires it).
    void this.displayed.then(() => {
      const widget = view.luminoWidget;
      if (this._inline === view && !widget.isDisposed && !widget.isAttached && this.el.isConnected) {
        Widget.attach(widget, this.el);
      }
    });
  }

  private _removed = false;
  private _inline: DOMWidgetView | null = null;
}

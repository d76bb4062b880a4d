import { DOMWidgetView, WidgetModel } from '@jupyter-widgets/base';
import { NotebookPanel } from '@jupyterlab/notebook';
import { ISignal, Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';

export const SIDEBAR_ID = 'ctx-magic-sidebar';
const HINT =
  'Run a %%agent cell in this notebook (or %ctx sidebar) to see what the agent can still see.';

/** What the sidebar holds for one notebook: a container and the panel view placed in it. */
interface IEntry {
  container: Panel;
  view: DOMWidgetView | null;
}

/**
 * The right-sidebar panel. Each notebook gets its own container, because every kernel has its
 * own ContextPanel; the sidebar shows the container of the active notebook, or a hint.
 */
export class ContextSidebar extends Panel {
  constructor() {
    super();
    this.id = SIDEBAR_ID;
    this.addClass('ctx-magic-sidebar');
    this._hint.addClass('ctx-magic-sidebar-hint');
    this._hint.node.textContent = HINT;
    this.addWidget(this._hint);
  }

  /** The notebook the sidebar follows (the tracker's current one). */
  get current(): NotebookPanel | null {
    return this._current;
  }

  /** The panel model of the active notebook, or null when it has none. */
  get activeModel(): WidgetModel | null {
    return this._current ? this.modelOf(this._current) : null;
  }

  /** Emits when `activeModel` may have changed (another notebook, a new or closed panel). */
  get activeModelChanged(): ISignal<this, WidgetModel | null> {
    return this._activeModelChanged;
  }

  /** Emits the notebook whose panel model was placed or went away. */
  get modelChanged(): ISignal<this, NotebookPanel> {
    return this._modelChanged;
  }

  modelOf(notebook: NotebookPanel): WidgetModel | null {
    return this._entries.get(notebook)?.view?.model ?? null;
  }

  /** The node of the context panel placed for `notebook`, or null. */
  panelNodeOf(notebook: NotebookPanel): HTMLElement | null {
    return this._entries.get(notebook)?.view?.el ?? null;
  }

  /**
   * Make `view` (a ContextPanel view created by an anchor in `notebook`) that notebook's context.
   * A newer anchor (the cell ran again, the notebook was reopened) replaces the older view.
   */
  place(notebook: NotebookPanel, view: DOMWidgetView): void {
    const entry = this._entry(notebook);
    if (entry.view === view) {
      return;
    }
    const previous = entry.view;
    entry.view = view;
    entry.container.addWidget(view.luminoWidget);
    // The panel model closes with its comm (the extension unloaded): its views go with it.
    view.luminoWidget.disposed.connect(() => {
      if (entry.view === view) {
        entry.view = null;
        this._changed(notebook);
      }
    });
    // A kernel restart leaves the model without its comm (it would show a dead session): the
    // hint shows until the new kernel's first %agent or %%agent places a new panel.
    view.model.on('comm_live_update', () => {
      if (!view.model.comm_live && entry.view === view) {
        view.remove();
      }
    });
    previous?.remove();
    this._changed(notebook);
  }

  /** Show the context of `notebook` (null: no notebook yet). */
  follow(notebook: NotebookPanel | null): void {
    this._current = notebook;
    this._showCurrent();
    this._activeModelChanged.emit(this.activeModel);
  }

  private _entry(notebook: NotebookPanel): IEntry {
    let entry = this._entries.get(notebook);
    if (!entry) {
      const container = new Panel();
      container.addClass('ctx-magic-notebook-context');
      container.hide();
      this.addWidget(container);
      entry = { container, view: null };
      this._entries.set(notebook, entry);
      notebook.disposed.connect(() => {
        this._entries.delete(notebook);
        container.dispose(); // disposes the panel view too
        if (this._current === notebook) {
          this.follow(null);
        }
      });
    }
    return entry;
  }

  private _changed(notebook: NotebookPanel): void {
    this._modelChanged.emit(notebook);
    if (notebook === this._current) {
      this._showCurrent();
      this._activeModelChanged.emit(this.activeModel);
    }
  }

  private _showCurrent(): void {
    const shown = this._current ? this._entries.get(this._current) : undefined;
    const visible = shown?.view ? shown.container : this._hint;
    for (const child of this.widgets) {
      child.setHidden(child !== visible);
    }
  }

  private _current: NotebookPanel | null = null;
  private _entries = new Map<NotebookPanel, IEntry>();
  private _hint = new Widget();
  private _activeModelChanged = new Signal<this, WidgetModel | null>(this);
  private _modelChanged = new Signal<this, NotebookPanel>(this);
}

import { WidgetModel } from '@jupyter-widgets/base';
import { CodeCell } from '@jupyterlab/cells';
import { Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';

import { ContextSidebar } from './sidebar';

export const HIDDEN_CLASS = 'ctx-magic-cell-hidden';
/** Set on output areas whose `title` we wrote, so we never remove a title someone else set. */
const TITLE_FLAG = 'ctxMagicTitle';

/** The panel's `cell_marks`: execution count (as text) -> why the agent no longer sees it. */
type Marks = Record<string, string>;

/** Mark the code cells of `notebook` whose output the agent no longer sees in full. */
export function markCells(notebook: Notebook, marks: Marks): void {
  for (const cell of notebook.widgets) {
    if (cell.model.type !== 'code') {
      continue;
    }
    const code = cell as CodeCell;
    const count = code.model.executionCount;
    const why = count === null ? undefined : marks[String(count)];
    code.toggleClass(HIDDEN_CLASS, why !== undefined);
    // A cell the windowed notebook has not rendered yet has no output area: marked on render.
    const area = code.outputArea as CodeCell['outputArea'] | undefined;
    if (!area) {
      continue;
    }
    if (why !== undefined) {
      area.node.title = why;
      area.node.dataset[TITLE_FLAG] = '1';
    } else if (area.node.dataset[TITLE_FLAG]) {
      area.node.removeAttribute('title');
      delete area.node.dataset[TITLE_FLAG];
    }
  }
}

/** One notebook's marks kept in step with its panel model and its cells. */
class Binding {
  constructor(
    readonly panel: NotebookPanel,
    readonly model: WidgetModel
  ) {
    model.on('change:cell_marks', this.refresh, this);
    panel.content.model?.cells.changed.connect(this.refresh, this);
    panel.content.cellInViewportChanged.connect(this.refresh, this);
    this.refresh();
  }

  refresh(): void {
    if (!this.panel.isDisposed) {
      markCells(this.panel.content, (this.model.get('cell_marks') ?? {}) as Marks);
    }
  }

  dispose(): void {
    this.model.off(null, null, this);
    Signal.disconnectReceiver(this);
    if (!this.panel.isDisposed) {
      markCells(this.panel.content, {});
    }
  }
}

/** Follows every notebook that has a context panel; a run cell gets its execution count late. */
export class CellMarker {
  constructor(sidebar: ContextSidebar) {
    sidebar.modelChanged.connect((_, panel) => this._bind(panel, sidebar.modelOf(panel)));
    NotebookActions.executed.connect((_, { notebook }) => {
      for (const binding of this._bindings.values()) {
        if (binding.panel.content === notebook) {
          binding.refresh();
        }
      }
    });
  }

  private _bind(panel: NotebookPanel, model: WidgetModel | null): void {
    const old = this._bindings.get(panel);
    if (old?.model === model) {
      old?.refresh();
      return;
    }
    old?.dispose();
    this._bindings.delete(panel);
    if (model && !panel.isDisposed) {
      this._bindings.set(panel, new Binding(panel, model));
    }
  }

  private _bindings = new Map<NotebookPanel, Binding>();
}

import { WidgetModel } from '@jupyter-widgets/base';
import { CodeCell } from '@jupyterlab/cells';
import { Notebook, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';
import { PanelLayout, Widget } from '@lumino/widgets';

import { ContextSidebar } from './sidebar';

export const MARKED_CLASS = 'ctx-magic-cell-hidden';
const ROW_CLASS = 'ctx-magic-mark';

/** One entry of the panel's `cell_marks` (ctx_magic/ui/marks.py). */
export interface IMark {
  count: number;
  kind: 'persisted' | 'cleared' | 'summarized';
  why: string;
  still: string;
  card: string;
}

/** `cell_marks`: a cell's id (or `count:N` for a cell without one) -> its mark. */
export type Marks = Record<string, IMark>;

const LABELS: Record<IMark['kind'], string> = {
  persisted: 'Saved to disk',
  cleared: 'Cleared',
  summarized: 'Summarized'
};
const ICONS: Record<IMark['kind'], string> = {
  persisted: '⤓',
  cleared: '○',
  summarized: '◆'
};

/**
 * The mark of a cell's current output: its id and execution count must both match, because a
 * cell run again shows an output the agent sees anew, and counts start over after a restart.
 */
export function markOf(
  cellId: string,
  count: number | null,
  marks: Marks
): IMark | undefined {
  if (count === null) {
    return undefined;
  }
  const mark = marks[cellId] ?? marks[`count:${count}`];
  return mark && mark.count === count ? mark : undefined;
}

function badgeRow(mark: IMark, open: (card: string) => void): HTMLElement {
  const row = document.createElement('div');
  row.className = ROW_CLASS;
  row.dataset.kind = mark.kind;
  const badge = document.createElement('button');
  badge.type = 'button';
  badge.className = 'ctx-magic-badge';
  badge.textContent = `${ICONS[mark.kind]} ${LABELS[mark.kind]} · agent context`;
  badge.setAttribute(
    'aria-label',
    `The agent no longer sees this output in full: ${mark.why}. Show details in the agent context panel.`
  );
  badge.addEventListener('click', () => open(mark.card));
  const popover = document.createElement('div');
  popover.className = 'ctx-magic-popover';
  popover.setAttribute('role', 'tooltip');
  const why = document.createElement('div');
  why.textContent = `The agent no longer sees this output in full: ${mark.why}.`;
  const still = document.createElement('div');
  still.textContent = `It still has ${mark.still}.`;
  const hint = document.createElement('div');
  hint.className = 'ctx-magic-popover-hint';
  hint.textContent = 'Click the badge for the details in the agent context panel.';
  popover.append(why, still, hint);
  row.append(badge, popover);
  return row;
}

/** The badge row of a cell: a Lumino widget placed in the cell's layout just above its output. */
const badges = new WeakMap<CodeCell, Widget>();

function placeBadge(code: CodeCell, mark: IMark | undefined, open: (card: string) => void): void {
  const wrapper = code.outputArea?.parent;
  const layout = code.layout as PanelLayout | null;
  const old = badges.get(code);
  const signature = mark ? JSON.stringify(mark) : '';
  if (old && !old.isDisposed && old.node.dataset.signature === signature) {
    return;
  }
  old?.dispose();
  badges.delete(code);
  if (!mark || !wrapper || !layout) {
    return;
  }
  const badge = new Widget({ node: badgeRow(mark, open) });
  badge.node.dataset.signature = signature;
  const index = layout.widgets.indexOf(wrapper);
  layout.insertWidget(index < 0 ? layout.widgets.length : index, badge);
  badges.set(code, badge);
}

/** Badge the code cells of `notebook` whose output the agent no longer sees in full. */
export function markCells(
  notebook: Notebook,
  marks: Marks,
  open: (card: string) => void
): void {
  for (const cell of notebook.widgets) {
    if (cell.model.type !== 'code') {
      continue;
    }
    const code = cell as CodeCell;
    const mark = markOf(code.model.id, code.model.executionCount, marks);
    code.toggleClass(MARKED_CLASS, mark !== undefined);
    // A cell the windowed notebook has not rendered yet has no output area: marked on render.
    placeBadge(code, mark, open);
  }
}

/** One notebook's marks kept in step with its panel model and its cells. */
class Binding {
  constructor(
    readonly panel: NotebookPanel,
    readonly model: WidgetModel,
    private readonly _open: (panel: NotebookPanel, card: string) => void
  ) {
    model.on('change:cell_marks', this.refresh, this);
    panel.content.model?.cells.changed.connect(this.refresh, this);
    panel.content.cellInViewportChanged.connect(this.refresh, this);
    this.refresh();
  }

  refresh(): void {
    if (!this.panel.isDisposed) {
      markCells(
        this.panel.content,
        (this.model.get('cell_marks') ?? {}) as Marks,
        card => this._open(this.panel, card)
      );
    }
  }

  dispose(): void {
    this.model.off(null, null, this);
    Signal.disconnectReceiver(this);
    if (!this.panel.isDisposed) {
      markCells(this.panel.content, {}, () => undefined);
    }
  }
}

/**
 * Follows every notebook that has a context panel; a run cell gets its execution count late.
 * `open` shows a notebook's panel and opens one of its cards.
 */
export class CellMarker {
  constructor(
    sidebar: ContextSidebar,
    private readonly _open: (panel: NotebookPanel, card: string) => void
  ) {
    sidebar.modelChanged.connect((_, panel) =>
      this._bind(panel, sidebar.modelOf(panel))
    );
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
      this._bindings.set(panel, new Binding(panel, model, this._open));
    }
  }

  private _bindings = new Map<NotebookPanel, Binding>();
}

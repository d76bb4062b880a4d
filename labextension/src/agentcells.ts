/**
 * The agent's code as notebook cells. Each block of code the agent runs (or asks to run) comes
 * in the `%%agent` cell's output with a MIME type of ctx_magic's (ctx_magic/notebook/agent_cells.py):
 * the cell's source (a marker line naming the call, then the code), its outputs as nbformat
 * outputs, the session and the call. This module
 *
 * - renders that output as JupyterLab would have (the bundle's HTML or Markdown) with an
 *   "Insert as cell" button under it;
 * - in `insert` mode, makes the cells by itself as the blocks arrive from the kernel, below the
 *   `%%agent` cell, in order, with their outputs;
 * - in `insert` mode, once a block is a cell, shows one line pointing to that cell in place of the
 *   block, so the code and its output are on screen once;
 * - gives every agent cell the execution count it ran under and a label saying whose code it is;
 * - tells each Python kernel it connects to that this frontend makes agent cells, so the kernel
 *   does not also place them through IPython's next-input mechanism (its fallback elsewhere).
 */

import { ISessionContext } from '@jupyterlab/apputils';
import { CodeCell, ICellModel } from '@jupyterlab/cells';
import * as nbformat from '@jupyterlab/nbformat';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { MimeModel, standardRendererFactories } from '@jupyterlab/rendermime';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { KernelMessage } from '@jupyterlab/services';
import { PanelLayout, Widget } from '@lumino/widgets';

import { MODULE_NAME, MODULE_VERSION } from './version';

/** ctx_magic/notebook/agent_cells.py `AGENT_CODE_MIME`. */
export const AGENT_CODE_MIME = 'application/vnd.ctx-magic.agent-code+json';
/** Ahead of HTML (50) and Markdown (60): this renderer shows them itself, with the button. */
export const AGENT_CODE_RANK = 40;
/** The cell tag of an agent cell (agent_cells.py `AGENT_TAG`). */
export const AGENT_TAG = 'ctx-agent';
/** agent_cells.py `FRONTEND_ENV`: set in the kernel so it leaves agent cells to this extension. */
const FRONTEND_ENV = 'CTX_MAGIC_FRONTEND';
const ANNOUNCEMENT =
  `__import__('os').environ.__setitem__('${FRONTEND_ENV}', '${MODULE_NAME} ${MODULE_VERSION}')`;
/** What the rest of the bundle is shown as, in JupyterLab's own order of preference. */
const SHOWN_AS = ['text/html', 'text/markdown', 'text/plain'];

/** One block of the agent's code, as the kernel sends it. */
export interface IAgentCode {
  session: string;
  call: string;
  source: string;
  code: string;
  outputs: nbformat.IOutput[];
  mode: 'button' | 'insert';
  ran: boolean;
  /** The frontend's id of the `%%agent` cell, when the kernel was told it. */
  cell: string | null;
  /** Its place among the kernel's blocks: cells of one `%%agent` cell keep this order. */
  order: number;
  /** Its place in its turn (1 for the turn's first block), for the label. */
  index?: number;
  /** The execution count of the `%%agent` cell it ran in; null when it did not run. */
  count: number | null;
}

/** The `ctx_magic.agent` metadata of an agent cell. */
export interface IAgentCellMeta {
  [key: string]: string | number | null;
  session: string;
  tool_use_id: string;
  from: string | null;
  order: number;
  index: number | null;
  count: number | null;
}

export function agentMetaOf(cell: ICellModel): IAgentCellMeta | null {
  const meta = cell.getMetadata('ctx_magic') as { agent?: IAgentCellMeta } | undefined;
  return meta?.agent ?? null;
}

function cellModels(panel: NotebookPanel): ICellModel[] {
  const cells = panel.content.model?.cells;
  return cells ? Array.from(cells) : [];
}

/** The notebook's cell holding the code of `call`, if there is one. */
export function cellOfCall(panel: NotebookPanel, call: string): ICellModel | undefined {
  return cellModels(panel).find(cell => agentMetaOf(cell)?.tool_use_id === call);
}

/**
 * Insert the block as a code cell below `from` (the `%%agent` cell), after the agent cells of
 * the same `%%agent` cell that come before it; nothing when the notebook already has it.
 */
export function insertAgentCell(
  panel: NotebookPanel,
  from: ICellModel | null,
  code: IAgentCode,
  trusted: boolean
): void {
  const model = panel.content.model;
  if (!model || cellOfCall(panel, code.call)) {
    return;
  }
  const cells = cellModels(panel);
  const fromId = from?.id ?? code.cell;
  let index = from ? cells.indexOf(from) + 1 : cells.length;
  while (index > 0 && index < cells.length) {
    const meta = agentMetaOf(cells[index]);
    if (!meta || meta.from !== fromId || meta.order > code.order) {
      break;
    }
    index++;
  }
  const agent: IAgentCellMeta = {
    session: code.session,
    tool_use_id: code.call,
    from: fromId,
    order: code.order,
    index: code.index ?? null,
    count: code.count ?? null
  };
  model.sharedModel.insertCell(index, {
    cell_type: 'code',
    source: code.source,
    // The count it ran under (the `%%agent` cell's), not `[ ]:` as if it had never run.
    execution_count: code.ran ? (code.count ?? null) : null,
    outputs: code.outputs,
    metadata: { trusted, tags: [AGENT_TAG], ctx_magic: { agent } }
  });
}

/** The `%%agent` cell a kernel message came from: by the id the kernel was sent, else by its run. */
function agentCellOf(
  panel: NotebookPanel,
  cellId: string | null,
  parentMsgId: string | undefined
): ICellModel | null {
  const byId = cellId ? cellModels(panel).find(cell => cell.id === cellId) : undefined;
  if (byId) {
    return byId;
  }
  const running = panel.content.widgets.find(
    widget =>
      widget instanceof CodeCell && widget.outputArea.future?.msg.header.msg_id === parentMsgId
  );
  return running?.model ?? null;
}

/** The block in the output, as JupyterLab would show it, with the "Insert as cell" button. */
export class AgentCodeView extends Widget implements IRenderMime.IRenderer {
  constructor(
    private readonly _options: IRenderMime.IRendererOptions,
    private readonly _tracker: INotebookTracker | null
  ) {
    super();
    this.addClass('ctx-magic-agent-code');
    this.layout = new PanelLayout();
    this._button.type = 'button';
    this._button.className = 'jp-Button jp-mod-styled ctx-magic-insert-cell';
    this._button.addEventListener('click', () => this._insert());
    this._row.className = 'ctx-magic-agent-actions';
    this._row.append(this._button);
    this._reference.className = 'ctx-magic-agent-ref';
    this._reference.hidden = true;
    this._goTo.type = 'button';
    this._goTo.className = 'jp-Button jp-mod-styled ctx-magic-go-to-cell';
    this._goTo.textContent = 'Go to cell';
    this._goTo.addEventListener('click', () => this._goToCell());
    this._reference.append(this._referenceText, this._goTo);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const layout = this.layout as PanelLayout;
    while (layout.widgets.length) {
      layout.widgets[0].dispose();
    }
    this._code = model.data[AGENT_CODE_MIME] as unknown as IAgentCode;
    this._trusted = model.trusted;
    const rest: Record<string, unknown> = { ...model.data };
    delete rest[AGENT_CODE_MIME];
    const mimeType = SHOWN_AS.find(type => type in rest);
    const factory = standardRendererFactories.find(f => mimeType && f.mimeTypes.includes(mimeType));
    if (mimeType && factory) {
      const shown = factory.createRenderer({ ...this._options, mimeType });
      await shown.renderModel(
        new MimeModel({
          data: rest as IRenderMime.IMimeModel['data'],
          metadata: model.metadata,
          trusted: model.trusted
        })
      );
      layout.addWidget(shown);
    }
    this.node.append(this._reference, this._row);
    this._refresh();
  }

  protected onAfterAttach(): void {
    this._panel = this._tracker?.find(panel => panel.node.contains(this.node)) ?? null;
    this._panel?.content.model?.cells.changed.connect(this._refresh, this);
    this._refresh();
  }

  protected onBeforeDetach(): void {
    this._panel?.content.model?.cells.changed.disconnect(this._refresh, this);
    this._panel = null;
  }

  private _refresh(): void {
    const code = this._code;
    if (!code) {
      return;
    }
    const inserted = this._panel ? cellOfCall(this._panel, code.call) !== undefined : false;
    // `insert` mode made the cell by itself: the block would show the same code and output twice.
    const folded = inserted && code.mode === 'insert' && code.ran;
    for (const widget of (this.layout as PanelLayout).widgets) {
      widget.setHidden(folded);
    }
    this._row.hidden = folded;
    this._reference.hidden = !folded;
    this._referenceText.textContent =
      `The agent's code${code.index ? ` (block ${code.index})` : ''} ran as the cell below, ` +
      'where its output is too.';
    this._button.disabled = inserted || !this._panel;
    this._button.textContent = inserted ? 'Inserted as cell' : 'Insert as cell';
    this._button.title = inserted
      ? 'This code is a cell of the notebook (its first line names the call)'
      : 'Make this code a cell below the %%agent cell, with its output';
    this._row.dataset.inserted = inserted ? '1' : '';
  }

  private _insert(): void {
    const panel = this._panel;
    const code = this._code;
    if (!panel || !code) {
      return;
    }
    const from = panel.content.widgets.find(cell => cell.node.contains(this.node))?.model ?? null;
    insertAgentCell(panel, from, code, this._trusted);
    this._refresh();
  }

  private _goToCell(): void {
    const panel = this._panel;
    const model = panel && this._code ? cellOfCall(panel, this._code.call) : undefined;
    if (!panel || !model) {
      return;
    }
    const index = cellModels(panel).indexOf(model);
    panel.content.activeCellIndex = index;
    panel.content.mode = 'command'; // selected, not opened for typing
    void panel.content.scrollToCell(panel.content.widgets[index], 'center');
  }

  private _button = document.createElement('button');
  private _reference = document.createElement('div');
  private _referenceText = document.createElement('span');
  private _goTo = document.createElement('button');
  private _row = document.createElement('div');
  private _code: IAgentCode | null = null;
  private _trusted = false;
  private _panel: NotebookPanel | null = null;
}

export function agentCodeFactory(tracker: INotebookTracker | null): IRenderMime.IRendererFactory {
  return {
    safe: true, // it shows the bundle with JupyterLab's own renderers, which sanitize untrusted output
    mimeTypes: [AGENT_CODE_MIME],
    defaultRank: AGENT_CODE_RANK,
    createRenderer: options => new AgentCodeView(options, tracker)
  };
}

/** `insert` mode: each block that ran becomes a cell as its message arrives (never from a saved file). */
function insertAsTheyCome(panel: NotebookPanel, msg: KernelMessage.IMessage): void {
  if (msg.channel !== 'iopub' || !KernelMessage.isDisplayDataMsg(msg as KernelMessage.IIOPubMessage)) {
    return;
  }
  const content = (msg as KernelMessage.IDisplayDataMsg).content;
  const code = content.data[AGENT_CODE_MIME] as unknown as IAgentCode | undefined;
  if (!code || code.mode !== 'insert' || !code.ran) {
    return;
  }
  const parent = (msg.parent_header as Partial<KernelMessage.IHeader>).msg_id;
  insertAgentCell(panel, agentCellOf(panel, code.cell, parent), code, true);
}

/** Tell a Python kernel that this frontend makes agent cells (silently: no count, no history). */
async function announce(context: ISessionContext): Promise<void> {
  const kernel = context.session?.kernel;
  if (!kernel) {
    return;
  }
  try {
    const info = await kernel.info;
    if (info.language_info.name === 'python' && !kernel.isDisposed) {
      kernel.requestExecute({ code: ANNOUNCEMENT, silent: true, store_history: false });
    }
  } catch {
    // A kernel that died or went away meanwhile: the next one is told when it comes.
  }
}

/** The visible label above an agent cell's input. */
const labels = new WeakMap<CodeCell, Widget>();

/**
 * What the label says: whose code it is and where it came from, in words. The call's id is in
 * the cell's first line already (the marker the kernel knows the cell by), so it is left out.
 */
export function agentLabel(meta: IAgentCellMeta): string {
  const where = typeof meta.count === 'number' ? ` in [${meta.count}]` : '';
  if (meta.index) {
    return `Agent's code · block ${meta.index} of its turn${where}`;
  }
  return where ? `Agent's code · from its turn${where}` : "Agent's code";
}

function placeLabel(cell: CodeCell): void {
  const meta = agentMetaOf(cell.model);
  const signature = meta ? JSON.stringify(meta) : '';
  const old = labels.get(cell);
  cell.toggleClass('ctx-magic-agent-cell', meta !== null);
  if (old && !old.isDisposed && old.node.dataset.signature === signature) {
    return;
  }
  old?.dispose();
  labels.delete(cell);
  const layout = cell.layout as PanelLayout | null;
  const input = cell.inputArea?.parent;
  if (!meta || !layout || !input) {
    return;
  }
  const node = document.createElement('div');
  node.className = 'ctx-magic-agent-tag';
  node.dataset.signature = signature;
  node.textContent = agentLabel(meta);
  node.title =
    `The agent's code, from its session ${meta.session}. While the cell's first line names the ` +
    'call (# ctx: agent …), running it again tells the agent it is its own code: it gets only ' +
    'the new output, or your edit as a diff.';
  const label = new Widget({ node });
  const index = layout.widgets.indexOf(input);
  layout.insertWidget(index < 0 ? 0 : index, label);
  labels.set(cell, label);
}

function labelCells(panel: NotebookPanel): void {
  if (panel.isDisposed) {
    return;
  }
  for (const cell of panel.content.widgets) {
    if (cell instanceof CodeCell) {
      placeLabel(cell);
    }
  }
}

/** Follow every notebook: labels on its agent cells, `insert` mode, the kernel told. */
export function followAgentCells(tracker: INotebookTracker): void {
  const follow = (panel: NotebookPanel): void => {
    const relabel = () => labelCells(panel);
    panel.content.model?.cells.changed.connect(relabel);
    panel.content.cellInViewportChanged.connect(relabel);
    panel.context.ready.then(relabel);
    const context = panel.sessionContext;
    context.iopubMessage.connect((_, msg) => insertAsTheyCome(panel, msg));
    context.kernelChanged.connect(() => void announce(context));
    context.statusChanged.connect((_, status) => {
      if (status === 'restarting' || status === 'autorestarting') {
        void announce(context); // queued by the connection until the new process is up
      }
    });
    void context.ready.then(() => announce(context));
  };
  tracker.forEach(follow);
  tracker.widgetAdded.connect((_, panel) => follow(panel));
}

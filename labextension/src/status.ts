import { WidgetModel } from '@jupyter-widgets/base';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { ContextSidebar } from './sidebar';

const WATCHED = 'change:percent_left change:zone change:tokens change:threshold change:next_call';

/** The panel's `next_call` trait: the cache as the next call finds it, a compaction ahead. */
interface NextCall {
  cache?: {
    state?: string;
    reason?: string;
    write_tokens?: number;
    write_usd?: number | null;
  } | null;
  ahead?: { tokens?: number; cost_usd?: number | null; deferred?: boolean } | null;
}

/** $0.0123 under a dollar, $12.34 above (as the kernel writes dollars). */
function usd(amount: number): string {
  return amount < 1 ? `$${amount.toFixed(4)}` : `$${amount.toFixed(2)}`;
}

/**
 * The status-bar item: the active notebook's "Context 92% left", coloured by zone, and what the
 * next call will write and cost when the kernel found the prompt cache cold (idle past its
 * lifetime, or a setting changed), so the price is seen before the cell is run.
 */
export class ContextStatus extends Widget {
  constructor(sidebar: ContextSidebar, onClick: () => void) {
    super();
    this.addClass('ctx-magic-statusbar');
    this.node.addEventListener('click', onClick);
    sidebar.activeModelChanged.connect((_, model) => this._bind(model));
    this._bind(sidebar.activeModel);
  }

  /** Whether there is anything to show (the status bar hides the item otherwise). */
  get isActive(): boolean {
    return this._model !== null;
  }

  get activeStateChanged(): ISignal<this, void> {
    return this._activeStateChanged;
  }

  dispose(): void {
    this._model?.off(null, null, this);
    super.dispose();
  }

  private _bind(model: WidgetModel | null): void {
    if (model !== this._model) {
      this._model?.off(null, null, this);
      this._model = model;
      model?.on(WATCHED, this._render, this);
      this._activeStateChanged.emit();
    }
    this._render();
  }

  private _render(): void {
    const model = this._model;
    if (!model) {
      this.node.textContent = '';
      return;
    }
    const zone = String(model.get('zone') ?? 'ok');
    const left = Math.round(Number(model.get('percent_left') ?? 100));
    const tokens = Number(model.get('tokens') ?? 0).toLocaleString();
    const threshold = Number(model.get('threshold') ?? 0).toLocaleString();
    const next = (model.get('next_call') ?? {}) as NextCall;
    const cold = next.cache?.state === 'cold' ? next.cache : null;
    const price =
      cold && cold.write_usd !== null && cold.write_usd !== undefined ? usd(cold.write_usd) : '';
    this.node.textContent = `Context ${left}% left` + (price ? ` · next call ${price}` : '');
    this.node.dataset.zone = zone;
    this.node.dataset.cache = cold ? 'cold' : 'warm';
    const written = cold
      ? ` The prompt cache is cold (${cold.reason ?? ''}): the next call writes ` +
        `${Number(cold.write_tokens ?? 0).toLocaleString()} tokens${price ? ` (${price})` : ''}.`
      : '';
    const ahead = next.ahead && !next.ahead.deferred ? ' The next turn compacts.' : '';
    this.node.title =
      `Agent context: ${tokens} of ${threshold} tokens before auto-compaction ` +
      `(zone ${zone}).${written}${ahead} Click to show the panel.`;
  }

  private _model: WidgetModel | null = null;
  private _activeStateChanged = new Signal<this, void>(this);
}

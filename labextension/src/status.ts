import { WidgetModel } from '@jupyter-widgets/base';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { ContextSidebar } from './sidebar';

const WATCHED = 'change:percent_left change:zone change:tokens change:threshold';

/** The status-bar item: the active notebook's "Context 92% left", coloured by zone. */
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
    this.node.textContent = `Context ${left}% left`;
    this.node.dataset.zone = zone;
    this.node.title =
      `Agent context: ${tokens} of ${threshold} tokens before auto-compaction ` +
      `(zone ${zone}). Click to show the panel.`;
  }

  private _model: WidgetModel | null = null;
  private _activeStateChanged = new Signal<this, void>(this);
}

/**
 * Opening a change's card in a context panel. The kernel's panel (ctx_magic/ui/panel.py) gives
 * every card a key: `data-ctx-card="<key>"` on a <details> card, or the class
 * `ctx-magic-card-<key>` on a compaction's accordion. Chart markers carry the same key, and so
 * do the cells' badges (marks.ts).
 */

const FLASH_CLASS = 'ctx-magic-flash';
const FLASH_MS = 1600;
const COLLAPSE_HEADER = '.jupyter-widget-Collapse-header';
const COLLAPSE_OPEN = 'jupyter-widget-Collapse-open';

/** The card of `key` inside `root` (a panel's node), or null. */
export function findCard(root: ParentNode, key: string): HTMLElement | null {
  const escaped = CSS.escape(key);
  return root.querySelector<HTMLElement>(
    `[data-ctx-card="${escaped}"]:not(.ctx-magic-marker), .ctx-magic-card-${escaped}`
  );
}

/** Open the card of `key` in `root`, scroll it into view and flash it; false when absent. */
export function openCard(root: ParentNode, key: string): boolean {
  const card = findCard(root, key);
  if (!card) {
    return false;
  }
  if (card instanceof HTMLDetailsElement) {
    card.open = true;
  } else {
    const header = card.querySelector<HTMLElement>(COLLAPSE_HEADER);
    if (header && !header.parentElement?.classList.contains(COLLAPSE_OPEN)) {
      header.click(); // the accordion's own handler opens it and tells the kernel's model
    }
  }
  card.scrollIntoView({ block: 'nearest' });
  card.classList.add(FLASH_CLASS);
  window.setTimeout(() => card.classList.remove(FLASH_CLASS), FLASH_MS);
  return true;
}

/** Chart markers open their card, in the sidebar and in a panel shown inline alike. */
export function listenToMarkers(doc: Document): void {
  doc.addEventListener('click', event => {
    const marker = (event.target as Element | null)?.closest?.(
      '.ctx-magic-marker'
    ) as HTMLElement | null;
    const key = marker?.dataset.ctxCard;
    const root = marker?.closest('.ctx-magic-panel');
    if (key && root) {
      event.preventDefault();
      openCard(root, key);
    }
  });
}

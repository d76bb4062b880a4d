/**
 * Buttons for the `ask` permission mode. While a turn runs, the kernel is busy executing the
 * %%agent cell: widget messages (a Button's click) travel on the shell channel, which the kernel
 * reads only between executions, so a widget button could never answer in time. The one channel
 * it reads mid-execution is stdin: ctx_magic shows the code, then asks at an input prompt
 * (notebook/executor.py). This adds "Run it" and "Don't run" beside that prompt; each types the
 * answer into the prompt and presses Enter, so the answer still goes through stdin. A frontend
 * without this extension shows the same prompt to type into.
 */

/** The start of the kernel's question (ctx_magic/notebook/executor.py `_allowed`). */
export const QUESTION = 'Run this code?';
const DONE = 'ctxMagicButtons';

function answer(input: HTMLInputElement, value: string): void {
  input.value = value;
  input.dispatchEvent(
    new KeyboardEvent('keydown', { key: 'Enter', bubbles: true })
  );
}

/** Add the buttons to one stdin prompt, if it is ctx_magic's question. */
export function decoratePrompt(stdin: HTMLElement): void {
  const prompt = stdin.querySelector('.jp-Stdin-prompt');
  const input = stdin.querySelector<HTMLInputElement>('.jp-Stdin-input');
  if (!prompt || !input || stdin.dataset[DONE] || !prompt.textContent?.startsWith(QUESTION)) {
    return;
  }
  stdin.dataset[DONE] = '1';
  const row = document.createElement('div');
  row.className = 'ctx-magic-approval';
  const choices: [string, string, string][] = [
    ['Run it', 'y', 'jp-mod-accept'],
    ["Don't run", 'n', 'jp-mod-reject']
  ];
  for (const [label, value, mod] of choices) {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = `jp-Button jp-mod-styled ${mod} ctx-magic-approval-button`;
    button.dataset.answer = value;
    button.textContent = label;
    button.addEventListener('click', () => {
      for (const other of Array.from(row.querySelectorAll('button'))) {
        other.disabled = true;
      }
      answer(input, value);
    });
    row.append(button);
  }
  stdin.append(row);
}

/** Watch `root` for input prompts (they come and go with each request of the kernel). */
export function watchPrompts(root: HTMLElement): MutationObserver {
  const observer = new MutationObserver(records => {
    for (const record of records) {
      for (const node of Array.from(record.addedNodes)) {
        if (!(node instanceof HTMLElement)) {
          continue;
        }
        const found = node.matches('.jp-Stdin')
          ? [node]
          : Array.from(node.querySelectorAll<HTMLElement>('.jp-Stdin'));
        found.forEach(decoratePrompt);
      }
    }
  });
  observer.observe(root, { childList: true, subtree: true });
  return observer;
}

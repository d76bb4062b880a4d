import { DOMWidgetView, IJupyterWidgetRegistry } from '@jupyter-widgets/base';
import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { agentCodeFactory, followAgentCells } from './agentcells';
import { SidebarAnchorModel, SidebarAnchorView, setSidebarHost } from './anchor';
import { watchPrompts } from './ask';
import { listenToMarkers, openCard } from './cards';
import { CellMarker } from './marks';
import { ContextSidebar, SIDEBAR_ID } from './sidebar';
import { ContextStatus } from './status';
import { MODULE_NAME, MODULE_VERSION } from './version';

namespace CommandIDs {
  export const compact = 'ctx-magic:compact';
  export const showPanel = 'ctx-magic:show-panel';
}

/** A gauge, drawn with JupyterLab's icon colour class so it follows the theme. */
const gaugeIcon = new LabIcon({
  name: 'ctx-magic:gauge',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M12 4A10 10 0 0 0 3.9 19.9l1.6-1.2A8 8 0 1 1 ' +
    '20 14a8 8 0 0 1-1.5 4.7l1.6 1.2A10 10 0 0 0 12 4zm4.3 4.3-5.2 4.3a2 2 0 1 0 2.3 2.4z"/></svg>'
});

/** The widget manager of a notebook exposes its document context (jupyterlab-manager 5). */
interface IDocumentWidgetManager {
  context?: unknown;
}

/** JupyterLab's shell and Notebook 7's both say whether the right side panel is collapsed. */
interface IRightSidedShell {
  rightCollapsed?: boolean;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: `${MODULE_NAME}:plugin`,
  description: 'The agent context panel of ctx_magic in the right sidebar, following the notebook.',
  autoStart: true,
  requires: [IJupyterWidgetRegistry],
  optional: [INotebookTracker, ILabShell, IStatusBar, ICommandPalette, IRenderMimeRegistry],
  activate: (
    app: JupyterFrontEnd,
    registry: IJupyterWidgetRegistry,
    tracker: INotebookTracker | null,
    labShell: ILabShell | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    rendermime: IRenderMimeRegistry | null
  ): void => {
    registry.registerWidget({
      name: MODULE_NAME,
      version: MODULE_VERSION,
      exports: { SidebarAnchorModel, SidebarAnchorView }
    });
    listenToMarkers(document);
    watchPrompts(document.body);
    // The agent's code blocks with their "Insert as cell" button (notebooks clone this registry).
    rendermime?.addFactory(agentCodeFactory(tracker));
    if (!tracker) {
      return; // no notebooks to follow: anchors render the panel inline
    }

    const sidebar = new ContextSidebar();
    sidebar.title.icon = gaugeIcon;
    sidebar.title.label = 'Agent context';
    sidebar.title.caption = 'Agent context: what the ctx_magic agent can still see';
    app.shell.add(sidebar, 'right', { rank: 650 });
    tracker.currentChanged.connect((_, notebook) => sidebar.follow(notebook));
    followAgentCells(tracker);
    sidebar.follow(tracker.currentWidget);

    let revealed = false;
    const reveal = (force: boolean): void => {
      // Opened by itself once per page, and only into an empty right area: never over the
      // debugger or property inspector a person chose to look at. JupyterLab's shell and
      // Notebook 7's both tell whether that area is collapsed.
      const shell = (labShell ?? app.shell) as unknown as IRightSidedShell;
      const automatic = !revealed && (shell.rightCollapsed ?? false);
      revealed = true;
      if (force || automatic) {
        app.shell.activateById(SIDEBAR_ID);
      }
    };
    new CellMarker(sidebar, (notebook, card) => {
      reveal(true);
      const node = sidebar.panelNodeOf(notebook);
      if (node) {
        // The sidebar may have just opened: let it lay out before scrolling to the card.
        requestAnimationFrame(() => openCard(node, card));
      }
    });
    setSidebarHost({
      sidebar,
      reveal,
      notebookOf: (view: DOMWidgetView) => notebookOf(tracker, view)
    });

    app.commands.addCommand(CommandIDs.showPanel, {
      label: 'Show agent context panel',
      caption: 'Open the right sidebar panel with the agent context of the active notebook',
      execute: () => reveal(true)
    });
    const kernel = () => tracker.currentWidget?.sessionContext.session?.kernel ?? null;
    app.commands.addCommand(CommandIDs.compact, {
      label: 'Compact agent context',
      caption:
        'Run %compact in the active notebook’s kernel (enabled once the notebook has an agent session)',
      // Only a kernel with ctx_magic loaded and a session has a panel; %compact needs both.
      isEnabled: () => kernel() !== null && sidebar.activeModel !== null,
      execute: async () => {
        // Silent: the result shows in the panel, not as a cell, and stays out of the history
        // (IPython fires no pre/post_run_cell for it, so ctx_magic does not capture it as a cell).
        await kernel()?.requestExecute({ code: '%compact', silent: true, store_history: false })
          .done;
      }
    });
    for (const command of [CommandIDs.compact, CommandIDs.showPanel]) {
      palette?.addItem({ command, category: 'Agent context' });
    }
    sidebar.activeModelChanged.connect(() =>
      app.commands.notifyCommandChanged(CommandIDs.compact)
    );

    if (statusBar) {
      const item = new ContextStatus(sidebar, () => reveal(true));
      statusBar.registerStatusItem(`${MODULE_NAME}:status`, {
        item,
        align: 'left',
        rank: 100,
        isActive: () => item.isActive,
        activeStateChanged: item.activeStateChanged
      });
    }
  }
};

/**
 * The notebook an anchor view was rendered for. A notebook's widget manager carries the
 * notebook's document context, known before the view is in the page; other managers (a
 * console's) do not, so fall back on where the view ends up in the DOM.
 */
async function notebookOf(
  tracker: INotebookTracker,
  view: DOMWidgetView
): Promise<NotebookPanel | null> {
  const manager = view.model.widget_manager as unknown as IDocumentWidgetManager;
  const byContext = manager.context
    ? tracker.find(panel => panel.context === manager.context)
    : undefined;
  if (byContext) {
    return byContext;
  }
  await view.displayed;
  return tracker.find(panel => panel.node.contains(view.el)) ?? null;
}

export default plugin;

/**
 * The widget module the kernel asks for: ctx_magic/ui/sidebar.py sets `_model_module` and
 * `_view_module` to this name with version "^0.1.0", so keep both in step with package.json.
 */
export const MODULE_NAME = '@ctx-magic/labextension';
export const MODULE_VERSION = '0.1.0';

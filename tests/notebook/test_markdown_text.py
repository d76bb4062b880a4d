"""Plain text in Markdown cells, rendered by mistune (what nbconvert renders a notebook's
Markdown with): every line break kept, nothing read as formatting, code fences kept as code."""

from __future__ import annotations

import mistune

from ctx_magic.notebook.markdown_text import code_fence, plain_as_markdown


def rendered(markdown: str) -> str:
    return str(mistune.html(markdown))


def test_every_line_break_is_kept_and_no_character_formats():
    text = "Use my_var and 2*3*4 here.\nThen __init__ and *args.\n# not a heading\n1. not a list\n- nor this"
    html = rendered(plain_as_markdown(text))
    assert html.count("<br />") == 4
    assert "<em>" not in html and "<strong>" not in html and "<h1>" not in html
    assert "<ol>" not in html and "<ul>" not in html
    assert "my_var and 2*3*4" in html and "__init__ and *args." in html and "# not a heading" in html


def test_html_entities_dollars_and_indents_are_shown_as_typed():
    html = rendered(plain_as_markdown("a <b>bold</b> &amp; $5 and $6\n    indented \\ back"))
    assert "&lt;b&gt;bold&lt;/b&gt; &amp;amp; $5 and $6" in html
    assert "\u00a0" * 4 + "indented \\ back" in html.replace("&nbsp;", "\u00a0")


def test_blank_lines_part_paragraphs_and_a_typed_code_fence_stays_code():
    text = "Run these.\n\n```python\nprint(a_b * 2)\n```\nafter it"
    html = rendered(plain_as_markdown(text))
    assert html.count("<p>") == 2 and "<br />" not in html  # no line break before or after a fence
    assert '<pre><code class="language-python">print(a_b * 2)\n</code></pre>' in html


def test_a_code_fence_outlasts_the_backticks_inside_it():
    fenced = code_fence("before\n```\nafter", "python")
    assert fenced.startswith("````python\n") and fenced.endswith("\n````")
    assert "after" in rendered(fenced).split("</code>")[0]

# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Small bar charts as inline SVG for the readiness report's HTML page (roles/report; controller side only).

What a chart shows comes from nodes and inventories (workload kinds, problem ids, driver versions), so
it is data, never markup: every value reaches the SVG only as the text of a ``<text>`` or ``<title>``
element, XML-escaped, with control characters taken out; attributes hold numbers and this module's own
words only.  No script, no style sheet, no link, no external asset: the page stays self-contained.

``bar_chart(title, bars)``: ``bars`` a list of ``{"label", "value", "parts": [(count, tone)], "note"}``;
one horizontal bar per entry, its length proportional to ``value`` (the largest value fills the width),
split into coloured parts (``tone``: ``good``, ``bad``, ``warn``, ``info``, ``none``).

PRIVATE: may change at any time; not for use outside gpuops.nvidia.
"""
from __future__ import annotations

import re
import unicodedata

# control characters (XML 1.0 has no place for most of them), line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_XML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}

TONES = {"good": "#2e7d32", "bad": "#c62828", "warn": "#ef8f00", "info": "#1f6fb2", "none": "#9e9e9e"}
WIDTH = 560          # the whole chart (two side by side on a 1280-pixel page)
LABEL_W = 170        # the label column
BAR_W = 140          # the longest bar
ROW_H = 22
TOP = 26             # the title line
LABEL_COLUMNS = 25   # a longer label is cut (the whole label is the bar's tooltip)
NOTE_COLUMNS = 38    # the same for the note after the bar
MAX_BARS = 12        # a chart's bars at most (the tables list everything)


def xml_text(value):
    """Any value as XML character data: control characters as a space, ``& < > " '`` as references."""
    text = _CONTROL.sub(" ", "" if value is None else "%s" % (value,))
    return "".join(_XML.get(ch, ch) for ch in text)


def display_width(text):
    """Terminal columns of ``text``: East Asian wide and fullwidth characters take two, combining marks and
    format characters (zero-width joiners, marks) none, everything else one."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def clip(text, columns):
    """``text`` cut to at most ``columns`` display columns, with an ellipsis when it was cut."""
    text = _CONTROL.sub(" ", "%s" % (text,))
    if display_width(text) <= columns:
        return text
    out, width = [], 0
    for ch in text:
        w = display_width(ch)
        if width + w > columns - 1:
            break
        out.append(ch)
        width += w
    return "".join(out) + "\u2026"


def _n(value):
    """A coordinate: an int, or a float with one decimal."""
    value = round(float(value), 1)
    return "%d" % value if value == int(value) else "%.1f" % value


def bar_chart(title, bars, empty="none", most=MAX_BARS):
    """The SVG markup (one ``<svg>`` element) of a horizontal bar chart; ``empty`` is the text shown
    when there are no bars.  Past ``most`` bars, the rest are one line of text (``and N more``)."""
    more = len(bars) - most if len(bars) > most else 0
    bars = bars[:most - 1] if more else bars
    more += 1 if more else 0
    rows = max(len(bars), 1) + (1 if more else 0)
    height = TOP + rows * ROW_H + 6
    top = max([int(b.get("value") or 0) for b in bars] + [1])
    out = ['<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" '
           'role="img" font-family="sans-serif" font-size="12">' % (WIDTH, height, WIDTH, height),
           "<title>%s</title>" % xml_text(title),
           '<text x="0" y="16" font-weight="bold">%s</text>' % xml_text(title)]
    if not bars:
        out.append('<text x="0" y="%d" fill="#555555">%s</text>' % (TOP + 15, xml_text(empty)))
    for i, entry in enumerate(bars):
        y = TOP + i * ROW_H
        label = "%s" % (entry.get("label"),)
        note = entry.get("note") or ("%s" % (entry.get("value"),))
        out.append("<g><title>%s</title>" % xml_text("%s: %s" % (label, note)))
        out.append('<text x="0" y="%s">%s</text>' % (_n(y + 15), xml_text(clip(label, LABEL_COLUMNS))))
        x = float(LABEL_W)
        for count, tone in entry.get("parts") or [(entry.get("value") or 0, "info")]:
            w = BAR_W * int(count) / top
            if w > 0:
                out.append('<rect x="%s" y="%s" width="%s" height="14" fill="%s"/>' % (
                    _n(x), _n(y + 4), _n(w), TONES.get(tone, TONES["none"])))
            x += w
        out.append('<text x="%s" y="%s" fill="#333333">%s</text></g>' % (_n(x + 6), _n(y + 15), xml_text(clip(note, NOTE_COLUMNS))))
    if more:
        note = xml_text("and %d more (see the tables)" % more)
        out.append('<text x="0" y="%d" fill="#555555">%s</text>' % (TOP + len(bars) * ROW_H + 15, note))
    out.append("</svg>")
    return "".join(out)

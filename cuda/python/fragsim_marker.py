"""Markers for fragsim traces: no-ops unless the process is being recorded.

    import fragsim_marker
    fragsim_marker.step(n)          # a step boundary
    fragsim_marker.agent("planner") # requests from here on come from this agent
    fragsim_marker.model("bert-a")  # ... or from this model
    fragsim_marker.text("warmup done")

It never imports torch and costs one dictionary lookup when not recording.
"""

import sys

__all__ = ["step", "agent", "model", "text", "begin", "end"]

# Marker kinds, as trace.MarkerKind numbers them.
TEXT, STEP, AGENT, MODEL, BEGIN, END = range(6)


def _mark(kind, s):
    hook = sys.modules.get("fragsim_hook")
    if hook is not None and hook.recording():
        hook._marker(kind, s)


def step(n):
    """Marks the start of step n (a number or a name)."""
    _mark(STEP, n)


def agent(name):
    """Marks that the following requests come from agent name."""
    _mark(AGENT, name)


def model(name):
    """Marks that the following requests come from model name."""
    _mark(MODEL, name)


def text(s):
    """Adds a free-text marker."""
    _mark(TEXT, s)


def begin(name):
    """Marks the start of a named region."""
    _mark(BEGIN, name)


def end(name):
    """Marks the end of a named region."""
    _mark(END, name)

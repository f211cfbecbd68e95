"""zl.patching: every change undone, newest first, inherited attributes not copied."""
import os

import pytest

from zl.patching import PatchStack


class Base:
    def method(self):
        return "base"


class Child(Base):
    pass


def test_class_override_is_removed_not_copied():
    stack = PatchStack()
    stack.setattr(Child, "method", lambda self: "patched")
    assert Child().method() == "patched"
    stack.undo_all()
    assert "method" not in Child.__dict__ and Child().method() == "base"


def test_undo_is_lifo_and_restores_first_value():
    class Obj:
        x = 1
    stack = PatchStack()
    stack.setattr(Obj, "x", 2)
    stack.setattr(Obj, "x", 3)
    assert len(stack) == 2
    stack.undo_all()
    assert Obj.x == 1 and len(stack) == 0


def test_setenv_set_and_remove_are_restored(monkeypatch):
    monkeypatch.setenv("ZL_PATCH_A", "old")
    monkeypatch.delenv("ZL_PATCH_B", raising=False)
    stack = PatchStack()
    stack.setenv("ZL_PATCH_A", None)
    stack.setenv("ZL_PATCH_B", "new")
    assert "ZL_PATCH_A" not in os.environ and os.environ["ZL_PATCH_B"] == "new"
    stack.undo_all()
    assert os.environ["ZL_PATCH_A"] == "old" and "ZL_PATCH_B" not in os.environ


def test_a_failing_undo_does_not_stop_the_others():
    done = []
    stack = PatchStack()
    stack.push(lambda: done.append("first"))
    stack.push(lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        stack.undo_all()
    assert done == ["first"]

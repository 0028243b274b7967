"""``naspipe.lifecycle.exception_chain.chain``: an exception, then what it replaced, each once."""

from __future__ import annotations

from naspipe.lifecycle.exception_chain import chain


def _raised(first: BaseException, then: BaseException, cause: bool) -> BaseException:
    try:
        try:
            raise first
        except BaseException as e:
            if cause:
                raise then from e
            raise then  # noqa: B904 - its context, not its cause, is the point
    except BaseException as e:
        return e


def test_the_chain_follows_causes_and_contexts_in_order_and_ends_on_a_loop():
    a, b = ValueError("a"), KeyboardInterrupt()
    assert list(chain(_raised(a, b, cause=False))) == [b, a]
    c, d = OSError("c"), RuntimeError("d")
    assert list(chain(_raised(c, d, cause=True))) == [d, c]
    a.__context__ = b  # a loop: b -> a -> b
    assert list(chain(b)) == [b, a]
    assert list(chain(None)) == []

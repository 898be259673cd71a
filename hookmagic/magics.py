"""The ``%%cudahook`` cell magic: capture what the GPU does while a cell runs.

Load with ``%load_ext hookmagic``. This module only parses arguments and wires the capture,
the Trace and its summary together; the work happens in ``hookmagic.capture`` and the
analysis/view modules.
"""
from __future__ import annotations

import ast
import os
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool
from traitlets.config import Configurable

from hookmagic.cupti.options import LITE_CONFLICTS, LITE_OFF, CaptureOptions
from hookmagic.magic_args import parse_line, split_statement

_CAPTURE_DEFAULTS = CaptureOptions()


def _capture_trait(name: str, help: str) -> Bool:
    """A configurable switch of the magic whose default is ``CaptureOptions``' default."""
    return Bool(getattr(_CAPTURE_DEFAULTS, name), help=help).tag(config=True)


@magics_class
class CudaHookMagics(Magics, Configurable):
    """GPU capture magics. Defaults are configurable: ``%config CudaHookMagics.stacks = False``."""

    # The capture defaults are CaptureOptions' own (the one place they live); only the help
    # text, written for the magic's user, is here.
    stacks = _capture_trait("stacks", "Record the Python stack that launched each kernel.")
    module_names = _capture_trait("module_names", "Name the nn.Modules in kernels' stacks "
                                  "(layer1.0.conv1); read by the stack walk, no hook per "
                                  "module call.")
    api = _capture_trait("api", "Record CUDA runtime and driver API calls.")
    memory = _capture_trait("memory", "Record every device allocation and free.")
    nvml = _capture_trait("nvml", "Sample GPU utilisation, clocks and power with NVML.")
    allocator_history = _capture_trait("allocator_history", "Also record PyTorch's allocator "
                                       "history and CuPy's pool hand-outs (costly on "
                                       "allocation-heavy code).")
    lite = _capture_trait("lite", "Cheapest capture: kernels, copies, memsets and memory only.")
    quiet = Bool(False, help="Do not display the summary after the cell.").tag(config=True)
    raise_error = Bool(True, help="Re-raise the cell's exception after showing the summary."
                       ).tag(config=True)
    report = Bool(True, help="Show the tabbed report widget (summary, flame graph, timeline, "
                  "diagnosis, kernels) instead of the plain summary.").tag(config=True)

    @magic_arguments()
    @argument("-o", dest="return_trace", action="store_true",
              help="Return the Trace as the cell's result instead of the cell's value.")
    @argument("-q", dest="quiet", action="store_true", default=None,
              help="Quiet: do not display the summary.")
    @argument("--save", metavar="PATH", help="Save the Trace to PATH (read it back with "
              "hookmagic.load(PATH)).")
    @argument("-v", dest="var", metavar="VAR", help="Store the Trace in the variable VAR.")
    @argument("-f", dest="focus", metavar="FUNC", help="Focus on FUNC (a function or method, "
              "its name, or a file), as %%lprun -f does: after the capture show its source "
              "with the GPU time launched under each line.")
    @argument("--stacks", dest="stacks", action="store_true", default=None,
              help="Record the Python stack of each kernel launch (default: on).")
    @argument("--no-stacks", dest="stacks", action="store_false",
              help="Do not record Python stacks.")
    @argument("--no-module-names", dest="module_names", action="store_false", default=None,
              help="Keep torch's Module._call_impl frames instead of naming the modules "
              "(and backward kernels' 'backward of <module/op>' frames).")
    @argument("--api", dest="api", action="store_true", default=None,
              help="Also record CUDA runtime and driver API calls.")
    @argument("--no-memory", dest="memory", action="store_false", default=None,
              help="Do not record allocations and frees.")
    @argument("--no-nvml", dest="nvml", action="store_false", default=None,
              help="Do not sample GPU utilisation with NVML.")
    @argument("--allocator", dest="allocator_history", action="store_true", default=None,
              help="Also record PyTorch's caching-allocator history and CuPy's pool "
              "(blocks inside segments, for the fragmentation map).")
    @argument("--lite", dest="lite", action="store_true", default=None,
              help="The cheapest capture: kernels, copies, memsets and memory only (no Python "
              "stacks, threads, ranges, synchronisation or NVML samples).")
    @argument("--counters", dest="counters", nargs="?", const="default", default=None,
              metavar="SET", help="Hardware counters per kernel (replays each kernel once per "
              "pass): SET is a set name (default: 'default') or comma-separated Nsight Compute "
              "metric names; in the line form write --counters=SET.")
    @argument("--pm-sampling", dest="pm_sampling", nargs="?", const="default", default=None,
              metavar="METRICS", help="GPU-wide SM/DRAM/tensor utilisation sampled over time "
              "(CUPTI's PM sampling, nothing replayed), as a lane under the timeline: METRICS "
              "is 'default' or comma-separated metric names of one hardware pass; in the line "
              "form write --pm-sampling=METRICS. Not with --counters.")
    @argument("--pm-interval-us", dest="pm_interval_us", type=float, default=None, metavar="US",
              help="PM sampling interval in µs of GPU time (default 100).")
    @argument("--no-raise-error", dest="raise_error", action="store_false", default=None,
              help="Show the cell's exception instead of raising it (later cells keep running).")
    @argument("--report", dest="report", action="store_true", default=None,
              help="Show the tabbed report widget after the cell (default: on).")
    @argument("--no-report", dest="report", action="store_false",
              help="Show only the plain summary after the cell.")
    @argument("--label", metavar="TEXT", help="Name for this capture, shown in summaries "
              "and diffs (default: the cell's In[] number).")
    @argument("statement", nargs="*", help="Line form: the statement to run, as %%time runs "
              "it (%%cudahook -f step step(x)).")
    @line_cell_magic
    def cudahook(self, line: str, cell: str | None = None) -> Any:
        """Run the cell while capturing its GPU kernels, copies, memory and Python stacks;
        ``%cudahook statement`` (the line form) runs one statement, as ``%time`` does.

        After the cell, a summary shows GPU busy time, the top kernels, copies and peak memory.
        The cell runs normally when no GPU, driver or CUPTI is available; the summary then
        says, in one line, why nothing was captured. An exception in the cell is raised after
        the (partial) summary, exactly once.

        Examples::

            %%cudahook -v t
            y = model(x)

            t.flame()        # where GPU time went, by Python stack

            %cudahook -f train_step train_step(model, batch)   # GPU time by line of train_step
        """
        __tracebackhide__ = True  # noqa: F841 - IPython hides this frame in tracebacks
        line, statement = split_statement(self.cudahook, line)
        args = parse_line(self.cudahook, line)
        if cell is None:
            if not statement:
                raise UsageError("%cudahook needs a statement after its options "
                                 "(%cudahook step(x)), or use %%cudahook for a cell")
            cell = statement
        elif statement:
            raise UsageError(f"%%cudahook takes options on its line, not code ({statement!r}): "
                             "put the code in the cell below it")
        if not cell.strip():
            raise UsageError("%%cudahook needs code in the cell below it")
        if args.var is not None and not args.var.isidentifier():
            raise UsageError(f"-v needs a variable name, not {args.var!r}")
        save = os.path.expanduser(args.save) if args.save else None
        if save and not os.path.isdir(os.path.dirname(os.path.abspath(save))):
            raise UsageError(f"--save: folder {os.path.dirname(os.path.abspath(save))!r} "
                             "does not exist")
        quiet = self.quiet if args.quiet is None else args.quiet
        raise_error = self.raise_error if args.raise_error is None else args.raise_error
        report = self.report if args.report is None else args.report
        lite = self.lite if args.lite is None else args.lite
        if lite:
            _refuse_with_lite(args)
        options = {
            "kernels": True,
            "memory": self.memory if args.memory is None else args.memory,
            "stacks": self.stacks if args.stacks is None else args.stacks,
            "module_names": (self.module_names if args.module_names is None
                             else args.module_names),
            "api": self.api if args.api is None else args.api,
            "nvml": self.nvml if args.nvml is None else args.nvml,
            "allocator_history": (self.allocator_history if args.allocator_history is None
                                  else args.allocator_history),
            "label": args.label or f"In [{_cell_number(self.shell)}]",
        }
        if args.focus is not None:
            _check_focus(args, options, quiet)
        body, last = self._compile(cell)   # a SyntaxError surfaces before anything starts
        if lite:  # lite turns stacks, NVML and the allocator history off itself
            options = {"lite": True, "memory": options["memory"], "label": options["label"]}
        if args.counters is not None:
            options["counters"] = args.counters
        if args.pm_sampling is not None:
            options["pm_sampling"] = args.pm_sampling
        if args.pm_interval_us is not None:
            options["pm_interval_us"] = args.pm_interval_us

        trace, value, error = self._run_captured(body, last, options, quiet)

        if args.var:
            self.shell.user_ns[args.var] = trace
        if not quiet:
            from IPython.display import display

            from hookmagic.views.outside import in_notebook_frontend, show_panel
            if report and trace.status != "unavailable" and not in_notebook_frontend():
                # terminal IPython: the summary, and the report as an offline HTML file
                show_panel(lambda: _report(trace, lazy=False), text=str(trace.summary()),
                           title=f"hookmagic report: {trace.meta.get('label', '')}")
            else:
                display(_report(trace) if report and trace.status != "unavailable"
                        else trace.summary())
            if args.focus is not None and trace.status != "unavailable":
                display(trace.lines(_focus_target(args.focus, self.shell.user_ns)))
        if save:
            try:
                trace.save(save)
            except OSError as err:
                if error is None:
                    error = err
                else:
                    print(f"hookmagic: could not save the trace to {save!r}: {err}",
                          file=sys.stderr)
        if error is not None:
            # Interrupts always propagate: the user asked the kernel to stop.
            if raise_error or not isinstance(error, Exception):
                raise error
            self.shell.showtraceback((type(error), error, error.__traceback__))
            return trace if args.return_trace else None
        return trace if args.return_trace else value

    # -- running the cell ---------------------------------------------------------------------
    def _compile(self, cell: str) -> tuple[Any, Any]:
        """Compile the cell as IPython's %%time does: body to exec, trailing expression to eval."""
        shell = self.shell
        source = shell.transform_cell(cell)
        tree = shell.compile.ast_parse(source)
        tree = shell.transform_ast(tree)
        # tracebacks show the cell's source, as In[N] of the cell that runs the magic
        filename = shell.compile.cache(source, _cell_number(shell))
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
            last = shell.compile(last, filename, "eval")
        body = shell.compile(ast.Module(tree.body, type_ignores=[]), filename, "exec")
        return body, last

    def _run_captured(self, body: Any, last: Any, options: dict[str, Any], quiet: bool
                      ) -> tuple[Any, Any, BaseException | None]:
        """Run the compiled cell inside a capture; never raises, returns (trace, value, error)."""
        __tracebackhide__ = True  # noqa: F841 - tracebacks start at the user's cell
        import hookmagic
        from hookmagic.trace.model import Trace

        ns = self.shell.user_ns
        value, error = None, None
        try:
            with _unavailable_shown_by_summary(enabled=not quiet):
                # Stacks start at the cell: this frame (and IPython's above it) is left out.
                # Module names are looked up among the notebook's variables.
                manager = hookmagic.capture(**options, _boundary_frame=sys._getframe(),
                                            _namespaces=[ns])
                trace = manager.__enter__()
        except Exception as err:  # the capture must never stop the cell from running
            from hookmagic.cupti.counters import COUNTER_ERRORS

            if isinstance(err, COUNTER_ERRORS):  # ...unless the counters asked for cannot be had
                from hookmagic.magic_args import MagicFailed

                raise MagicFailed(str(err)) from err
            manager, trace = None, Trace.empty(f"the capture could not start ({err!r})",
                                               label=options.get("label"))
        try:
            exec(body, ns)
            if last is not None:
                value = eval(last, ns)
        except BaseException as err:  # KeyboardInterrupt too: stop the capture, then re-raise
            error = err
        finally:
            if manager is not None:
                exc = (type(error), error, error.__traceback__) if error else (None, None, None)
                try:
                    with _unavailable_shown_by_summary(enabled=not quiet):
                        manager.__exit__(*exc)
                except Exception as err:
                    warnings.warn(f"hookmagic: stopping the capture failed: {err!r}",
                                  RuntimeWarning, stacklevel=2)
        return trace, value, error


def _check_focus(args: Any, options: dict[str, Any], quiet: bool) -> None:
    """-f needs what it shows: Python stacks, and output. One UsageError line otherwise."""
    if getattr(args, "lite", False):
        raise UsageError("-f shows GPU time by line, which needs Python stacks; --lite records "
                         "none: drop one of them")
    if not options.get("stacks", True):
        how = "--no-stacks" if args.stacks is False else "CudaHookMagics.stacks = False"
        raise UsageError(f"-f shows GPU time by line, which needs Python stacks; {how} turns "
                         "them off: drop one of them (or pass --stacks)")
    if quiet:
        raise UsageError("-f shows the lines of FUNC and -q shows nothing: drop one of them")


def _focus_target(text: str, namespace: dict[str, Any]) -> Any:
    """-f's FUNC: the object it names in the user's namespace (``model.forward``), else the text
    itself (a function or file name, resolved against the trace's stacks)."""
    try:
        value = eval(text, namespace)  # noqa: S307 - the user's own expression, as %lprun -f
    except Exception:
        return text
    return value if callable(value) or hasattr(value, "co_filename") else text


def _cell_number(shell: Any) -> int:
    """The In[N] number of the cell running now.

    IPython 9 counts ``execution_count`` up before a cell runs, so during the cell it names the
    next one; the number IPython gave this cell is the one its code was compiled under.
    """
    numbers = getattr(shell.compile, "_filename_map", {})
    frame = sys._getframe(1)
    while frame is not None:
        number = numbers.get(frame.f_code.co_filename)
        if isinstance(number, int):
            return number
        frame = frame.f_back
    return int(shell.execution_count)   # run outside a cell (e.g. run_cell_magic from code)


def _report(trace: Any, lazy: bool | None = None) -> Any:
    """The report widget (its text/plain is the summary), or the summary if it cannot be made."""
    try:
        from hookmagic.views.report import report_widget
        return report_widget(trace, lazy=lazy)
    except Exception as err:  # e.g. ipywidgets missing: never lose the summary over it
        warnings.warn(f"hookmagic: showing the plain summary, the report failed: {err!r}",
                      RuntimeWarning, stacklevel=2)
        return trace.summary()


@contextmanager
def _unavailable_shown_by_summary(enabled: bool) -> Iterator[None]:
    """Silence CaptureUnavailable while the summary is going to say the same thing.

    Scoped to starting/stopping the capture only: wrapping the user's code in
    catch_warnings would undo any warning filters the cell itself sets.
    """
    if not enabled:
        yield
        return
    import hookmagic
    try:
        CaptureUnavailable = hookmagic.CaptureUnavailable
    except (AttributeError, ImportError):  # pragma: no cover - capture package absent
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CaptureUnavailable)
        yield


def _refuse_with_lite(args: Any) -> None:
    """One UsageError line when --lite meets an option it cannot honour (CaptureOptions'
    LITE_OFF and LITE_CONFLICTS, plus -f, which needs stacks)."""
    flags = {a.dest: a.option_strings[0] for a in CudaHookMagics.cudahook.parser._actions
             if a.option_strings and a.const is True}
    clash = [flags[name] for name in LITE_OFF + LITE_CONFLICTS
             if name in flags and getattr(args, name, None) is True]
    if getattr(args, "focus", None) is not None:
        clash.append("-f")
    if clash:
        raise UsageError(f"%%cudahook: --lite records no Python stacks, threads or API calls, "
                         f"so it cannot be combined with {', '.join(clash)}")

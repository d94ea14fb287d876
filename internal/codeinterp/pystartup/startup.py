"""agent-sandbox startup for the code interpreter's Python kernel.

The kernel runs this file once, in the user namespace, before the first cell
(see doc.go for the command line). It leaves no names behind and installs:

* an ``e2b/data`` formatter: a pandas DataFrame becomes a dict of column name
  to list of values (timestamps as ISO 8601 strings, NaN/NaT as null);
* an ``e2b/chart`` formatter: a matplotlib Figure becomes the typed chart
  description that @e2b/code-interpreter exposes as ``result.chart`` (line,
  scatter, bar, pie, box_and_whisker, superchart or unknown). Together with
  the inline backend's ``image/png`` it rides in the same display_data;
* plain tracebacks (no ANSI colours);
* PIL: ``Image.show()`` and ``Image.save(path)`` display the image.

pandas, matplotlib and PIL are optional and never imported here: the
formatters recognise types by module and name, and the patches that need a module
are applied when the user's code first imports it. Nothing here may stop the
kernel from starting, so every step reports its failure to the kernel's own
stderr (the server log) and carries on.
"""


def _agent_sandbox_startup():
    import datetime
    import decimal
    import functools
    import importlib.util
    import inspect
    import math
    import os
    import re
    import sys
    import traceback

    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def report(step):
        """Writes the current exception to the kernel process's stderr (the
        server's log), not to the cell: ipykernel forwards fd 2 to the cell,
        but its sys.stderr.fileno() is a copy of the original fd 2."""
        message = "agent-sandbox startup: %s failed:\n%s" % (step, traceback.format_exc())
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            fd = 2
        try:
            os.write(fd, message.encode("utf-8", "replace"))
        except OSError:
            pass

    # ------------------------------------------------------------------
    # JSON-safe values
    # ------------------------------------------------------------------

    def finite(value):
        """A float, or None for NaN, infinities and anything not a number."""
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            return None
        if math.isnan(number) or math.isinf(number):
            return None
        return number

    def plain(value):
        """Turns one cell of a DataFrame into a JSON value."""
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return finite(value)
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            # pandas.NaT is a datetime subclass whose isoformat() is "NaT".
            if value != value:
                return None
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            if value != value:
                return None
            return str(value)
        if isinstance(value, decimal.Decimal):
            return finite(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        item = getattr(value, "item", None)  # numpy scalars
        if callable(item) and getattr(value, "shape", None) == ():
            try:
                return plain(item())
            except (TypeError, ValueError):
                pass
        try:
            if value != value:  # pandas.NA, numpy.datetime64("NaT")
                return None
        except (TypeError, ValueError):
            pass
        return str(value)

    def column_name(key):
        if isinstance(key, str):
            return key
        if isinstance(key, tuple):  # MultiIndex columns
            return " ".join(str(part) for part in key)
        return str(key)

    def dataframe_to_data(frame):
        """The e2b/data shape: {column: [values...]} (to_dict orient="list")."""
        return {
            column_name(name): [plain(v) for v in column.tolist()]
            for name, column in frame.items()
        }

    # ------------------------------------------------------------------
    # matplotlib Figure -> chart
    # ------------------------------------------------------------------

    BOXPLOTS = "_agent_sandbox_boxplots"
    UNIT = re.compile(r"\(([^()]*)\)|\[([^\[\]]*)\]")
    MATHDEFAULT = "\\mathdefault{"

    def text_or_none(text):
        return text if text and text.strip() else None

    def unit_of(label):
        """The unit in a label such as "Time (s)" or "Length [m]"."""
        if not label:
            return None
        found = [a or b for a, b in UNIT.findall(label) if (a or b).strip()]
        return found[-1].strip() if found else None

    def tick_text(text):
        """A tick label as shown: "$\\mathdefault{10^{2}}$" -> "10^{2}"."""
        if len(text) >= 2 and text[0] == "$" and text[-1] == "$":
            text = text[1:-1]
        if text.startswith(MATHDEFAULT) and text.endswith("}"):
            text = text[len(MATHDEFAULT) : -1]
        return text

    class AxisInfo:
        """How values on one axis (x or y) of an Axes turn into JSON."""

        def __init__(self, axis):
            import matplotlib.category as mcategory
            import matplotlib.dates as mdates

            self.axis = axis
            self._ticks = None
            self._num2date = mdates.num2date
            # Dates plotted directly get a (switchable) date converter; a
            # date locator covers axes set up by hand or by pandas.
            converters = tuple(
                c
                for c in (mdates.DateConverter, getattr(mdates, "_SwitchableDateConverter", None))
                if isinstance(c, type)
            )
            self.is_datetime = isinstance(
                getattr(axis, "converter", None), converters
            ) or isinstance(axis.get_major_locator(), mdates.DateLocator)
            # pandas plots a regular time series as Period ordinals in its
            # frequency (days, months...), with a locator that knows it.
            self.period_freq = None
            locator = axis.get_major_locator()
            if type(locator).__name__ == "TimeSeries_DateLocator" and getattr(locator, "freq", None):
                self.is_datetime = True
                self.period_freq = locator.freq
            self.categories = {}
            units = getattr(axis, "units", None)
            if not self.is_datetime and isinstance(units, mcategory.UnitData):
                mapping = getattr(units, "_mapping", {}) or {}
                self.categories = {int(v): str(k) for k, v in mapping.items()}

        @property
        def is_categorical(self):
            return bool(self.categories)

        def scale(self):
            if self.is_datetime:
                return "datetime"
            if self.is_categorical:
                return "categorical"
            return self.axis.get_scale()

        def value(self, number):
            """A data value: an ISO string on a date axis, the category name
            on a categorical axis, else a number (None when not finite)."""
            number = finite(number)
            if number is None:
                return None
            if self.is_datetime:
                return self.iso(number)
            if self.categories:
                index = round(number)
                if abs(number - index) < 1e-9 and index in self.categories:
                    return self.categories[index]
            return number

        def iso(self, number):
            try:
                if self.period_freq is not None:
                    import pandas

                    period = pandas.Period(ordinal=int(round(number)), freq=self.period_freq)
                    return period.start_time.tz_localize("UTC").isoformat()
                return self._num2date(number).isoformat()
            except (ValueError, OverflowError, TypeError):
                return None

        def ticks(self):
            """The major ticks inside the view and their labels, as drawn."""
            lo, hi = sorted(self.axis.get_view_interval())
            slack = (hi - lo) * 1e-9
            values, labels = [], []
            for loc, text in zip(*self.all_ticks()):
                if lo - slack <= loc <= hi + slack:
                    values.append(self.iso(loc) if self.is_datetime else float(loc))
                    labels.append(text)
            return values, labels

        def all_ticks(self):
            """All major tick locations and their labels; like a draw, the
            labels are formatted together, then clipped to the view."""
            if self._ticks is None:
                locs = [
                    loc
                    for loc in self.axis.get_majorticklocs()
                    if finite(loc) is not None
                ]
                formatter = self.axis.get_major_formatter()
                labels = [tick_text(str(t)) for t in formatter.format_ticks(locs)]
                self._ticks = (locs, labels)
            return self._ticks

        def label_at(self, lo, hi):
            """The name of the category a bar or box spanning [lo, hi] on this
            axis stands for: the tick label inside the span nearest its
            centre, else the category, else the centre value itself."""
            lo, hi = min(lo, hi), max(lo, hi)
            centre = (lo + hi) / 2
            slack = max(hi - lo, 1.0) * 1e-9
            locs, labels = self.all_ticks()
            inside = [
                (abs(loc - centre), text)
                for loc, text in zip(locs, labels)
                if lo - slack <= loc <= hi + slack and text.strip()
            ]
            if inside:
                return min(inside, key=lambda pair: pair[0])[1]
            value = self.value(centre)
            if isinstance(value, str):
                return value
            if value is None:
                return ""
            return "%g" % value

    def float_array(values):
        import numpy as np

        try:
            array = np.ma.asarray(values, dtype=float)
        except (TypeError, ValueError):
            return []
        return np.ma.filled(array, np.nan).ravel().tolist()

    def base_chart(kind, ax):
        title = None
        for loc in ("center", "left", "right"):
            title = text_or_none(ax.get_title(loc))
            if title:
                break
        return {"type": kind, "title": title, "elements": []}

    def chart_2d(kind, ax, horizontal=False):
        chart = base_chart(kind, ax)
        x_label = text_or_none(ax.get_xlabel())
        y_label = text_or_none(ax.get_ylabel())
        if horizontal:
            # The category axis is reported as x, as for vertical charts.
            x_label, y_label = y_label, x_label
        chart.update(
            x_label=x_label,
            y_label=y_label,
            x_unit=unit_of(x_label),
            y_unit=unit_of(y_label),
        )
        return chart

    def point_chart(kind, ax, series):
        """A line or scatter chart; series is [(label, xs, ys)] with xs and
        ys already converted to axis units (floats)."""
        chart = chart_2d(kind, ax)
        x_info, y_info = AxisInfo(ax.xaxis), AxisInfo(ax.yaxis)
        x_ticks, x_tick_labels = x_info.ticks()
        y_ticks, y_tick_labels = y_info.ticks()
        chart.update(
            x_ticks=x_ticks,
            x_tick_labels=x_tick_labels,
            x_scale=x_info.scale(),
            y_ticks=y_ticks,
            y_tick_labels=y_tick_labels,
            y_scale=y_info.scale(),
        )
        for label, xs, ys in series:
            points = [[x_info.value(x), y_info.value(y)] for x, y in zip(xs, ys)]
            chart["elements"].append({"label": str(label), "points": points})
        return chart

    def line_chart(ax, lines, labels):
        series = [
            (
                labels.get(id(line), line.get_label()),
                float_array(line.get_xdata(orig=False)),
                float_array(line.get_ydata(orig=False)),
            )
            for line in lines
        ]
        return point_chart("line", ax, series)

    def scatter_chart(ax, collections):
        series = []
        for collection in collections:
            offsets = collection.get_offsets()
            xs = float_array(offsets[:, 0]) if len(offsets) else []
            ys = float_array(offsets[:, 1]) if len(offsets) else []
            series.append((collection.get_label(), xs, ys))
        return point_chart("scatter", ax, series)

    def bar_chart(ax, containers):
        horizontal = all(
            getattr(c, "orientation", "vertical") == "horizontal" for c in containers
        )
        chart = chart_2d("bar", ax, horizontal=horizontal)
        x_info, y_info = AxisInfo(ax.xaxis), AxisInfo(ax.yaxis)
        for index, container in enumerate(containers):
            group = container.get_label() or ""
            if not group or group.startswith("_"):
                numbered = re.fullmatch(r"_container(\d+)", group)
                group = "Group %s" % (numbered.group(1) if numbered else index)
            flat = getattr(container, "orientation", "vertical") == "horizontal"
            for rect in container.patches:
                if flat:
                    lo, hi = rect.get_y(), rect.get_y() + rect.get_height()
                    label, value = y_info.label_at(lo, hi), rect.get_width()
                else:
                    lo, hi = rect.get_x(), rect.get_x() + rect.get_width()
                    label, value = x_info.label_at(lo, hi), rect.get_height()
                chart["elements"].append(
                    {"label": label, "group": group, "value": finite(value)}
                )
        return chart

    def pie_chart(ax, wedges):
        chart = base_chart("pie", ax)
        for wedge in wedges:
            # pie() leaves wedge angles ~1e-5 degrees off (323.99999 for
            # 90%); 4 decimals restores the intended value.
            angle = finite(wedge.theta2 - wedge.theta1)
            chart["elements"].append(
                {
                    "label": str(wedge.get_label()),
                    "angle": None if angle is None else abs(round(angle, 4)),
                    "radius": finite(wedge.r),
                }
            )
        return chart

    def box_chart(ax, boxes):
        horizontal = all(box["horizontal"] for box in boxes)
        chart = chart_2d("box_and_whisker", ax, horizontal=horizontal)
        infos = {False: AxisInfo(ax.xaxis), True: AxisInfo(ax.yaxis)}
        for box in sorted(boxes, key=lambda b: b["position"]):
            stats = box["stats"]
            label = stats.get("label")
            if label is None or str(label) == "":
                half = box["width"] / 2
                label = infos[box["horizontal"]].label_at(
                    box["position"] - half, box["position"] + half
                )
            chart["elements"].append(
                {
                    "label": str(label),
                    "min": finite(stats.get("whislo")),
                    "first_quartile": finite(stats.get("q1")),
                    "median": finite(stats.get("med")),
                    "third_quartile": finite(stats.get("q3")),
                    "max": finite(stats.get("whishi")),
                    "outliers": [
                        v
                        for v in (finite(f) for f in float_array(stats.get("fliers", [])))
                        if v is not None
                    ],
                }
            )
        return chart

    def live_boxplots(ax, present):
        """Box plots drawn on ax (recorded by the bxp patch) whose artists
        are still there; a later box at the same position replaces one."""
        by_position = {}
        for box in getattr(ax, BOXPLOTS, ()):
            if id(box["anchor"]) in present:
                by_position[box["position"]] = box
        return list(by_position.values())

    def is_reference_line(line, ax):
        """axhline/axvline-style lines: not data but guides."""
        if line.get_transform() != ax.transData:
            return True
        xs = float_array(line.get_xdata(orig=False))
        ys = float_array(line.get_ydata(orig=False))
        return len(xs) == 2 and len(ys) == 2 and (xs[0] == xs[1] or ys[0] == ys[1])

    def axes_chart(ax):
        """The chart for one Axes, or None when it holds no data."""
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer, ErrorbarContainer
        from matplotlib.lines import Line2D
        from matplotlib.patches import Wedge

        artists = []
        for group in (ax.lines, ax.collections, ax.patches, ax.images, ax.tables, ax.artists):
            artists.extend(group)
        present = {id(a) for a in artists}

        boxes = live_boxplots(ax, present)
        if boxes:
            return box_chart(ax, boxes)

        bar_containers = [c for c in ax.containers if isinstance(c, BarContainer)]
        # errorbar(): its data line is the series (labelled by the
        # container); caps and bars are decoration.
        bar_parts, errorbar_labels, errorbar_parts = set(), {}, set()
        for container in ax.containers:
            if isinstance(container, BarContainer):
                bar_parts.update(id(p) for p in container.patches)
                errorbar = getattr(container, "errorbar", None)
                if errorbar is not None:
                    bar_parts.update(id(a) for a in flatten(errorbar))
            elif isinstance(container, ErrorbarContainer):
                data_line = container.lines[0] if container.lines else None
                for part in flatten(container):
                    if part is data_line:
                        errorbar_labels[id(part)] = container.get_label()
                    else:
                        errorbar_parts.add(id(part))

        kinds = {}
        references = []
        for artist in artists:
            if id(artist) in bar_parts:
                kinds.setdefault("bar", []).append(artist)
            elif id(artist) in errorbar_parts:
                continue
            elif isinstance(artist, Wedge):
                kinds.setdefault("pie", []).append(artist)
            elif isinstance(artist, Line2D):
                if is_reference_line(artist, ax) and id(artist) not in errorbar_labels:
                    references.append(artist)
                else:
                    kinds.setdefault("line", []).append(artist)
            elif isinstance(artist, PathCollection):
                kinds.setdefault("scatter", []).append(artist)
            else:
                kinds.setdefault("other", []).append(artist)
        if not kinds and references:
            kinds["line"] = references

        if not kinds:
            return None
        if len(kinds) > 1 or "other" in kinds:
            return base_chart("unknown", ax)
        kind, members = next(iter(kinds.items()))
        if kind == "line":
            return line_chart(ax, members, errorbar_labels)
        if kind == "scatter":
            return scatter_chart(ax, members)
        if kind == "bar":
            return bar_chart(ax, bar_containers)
        return pie_chart(ax, members)

    def flatten(container):
        out = []
        stack = list(container)
        while stack:
            item = stack.pop(0)
            if item is None:
                continue
            if isinstance(item, (list, tuple)):
                stack[:0] = list(item)
            else:
                out.append(item)
        return out

    def figure_to_chart(figure):
        """The e2b/chart shape for a Figure, or None for an empty figure."""
        axes = [
            ax
            for ax in figure.get_axes()
            if getattr(ax, "_colorbar", None) is None and ax.get_visible()
        ]
        charts = [(ax, axes_chart(ax)) for ax in axes]
        suptitle = getattr(figure, "_suptitle", None)
        suptitle = text_or_none(suptitle.get_text()) if suptitle is not None else None
        if all(chart is None for _, chart in charts):
            if len(axes) == 1 and text_or_none(axes[0].get_title()):
                return base_chart("unknown", axes[0])
            return None
        if len(charts) == 1:
            chart = charts[0][1]
            if chart["title"] is None:
                chart["title"] = suptitle
            return chart
        elements = []
        for ax, chart in charts:
            if chart is None:
                if not ax.axison:
                    continue  # an unused cell of a subplot grid, switched off
                chart = base_chart("unknown", ax)
            elements.append(chart)
        return {"type": "superchart", "title": suptitle, "elements": elements}

    def chart_or_none(figure):
        try:
            return figure_to_chart(figure)
        except Exception:
            # A chart we cannot read must not cost the user the image.
            report("e2b/chart extraction")
            return None

    def data_or_none(frame):
        try:
            return dataframe_to_data(frame)
        except Exception:
            report("e2b/data conversion")
            return None

    # ------------------------------------------------------------------
    # patches applied when the user imports a module
    # ------------------------------------------------------------------

    def record_boxplots(axes_module):
        """Wraps Axes.bxp (which boxplot calls) to remember each box's
        statistics on the Axes, since the drawn lines lose them."""
        Axes = axes_module.Axes
        original = Axes.bxp
        if getattr(original, "_agent_sandbox", False):
            return
        signature = inspect.signature(original)

        @functools.wraps(original)
        def bxp(self, bxpstats, *args, **kwargs):
            artists = original(self, bxpstats, *args, **kwargs)
            try:
                remember(self, signature, bxpstats, args, kwargs, artists)
            except Exception:
                report("recording a box plot")
            return artists

        bxp._agent_sandbox = True
        Axes.bxp = bxp

    def remember(ax, signature, bxpstats, args, kwargs, artists):
        bound = signature.bind(ax, bxpstats, *args, **kwargs)
        bound.apply_defaults()
        params = bound.arguments
        stats = list(bxpstats)
        positions = params.get("positions")
        positions = list(positions) if positions is not None else range(1, len(stats) + 1)
        widths = params.get("widths")
        if widths is None:
            # bxp's own default
            span = (max(positions) - min(positions)) if len(stats) > 1 else 0
            widths = [min(max(0.15 * span, 0.15), 0.5)] * len(stats)
        elif not hasattr(widths, "__len__"):
            widths = [widths] * len(stats)
        orientation = params.get("orientation")
        if orientation is None:
            vert = params.get("vert")
            orientation = "vertical" if vert is None or vert else "horizontal"
        medians = artists.get("medians") or []
        whiskers = artists.get("whiskers") or []
        recorded = getattr(ax, BOXPLOTS, None)
        if recorded is None:
            recorded = []
            setattr(ax, BOXPLOTS, recorded)
        for i, (stat, position, width) in enumerate(zip(stats, positions, widths)):
            if i < len(medians):
                anchor = medians[i]
            elif 2 * i < len(whiskers):
                anchor = whiskers[2 * i]
            else:
                continue
            recorded.append(
                {
                    "stats": dict(stat),
                    "position": float(position),
                    "width": float(width),
                    "horizontal": orientation == "horizontal",
                    "anchor": anchor,
                }
            )

    def display_pil_images(image_module):
        """Image.show() displays the image in the cell's output (there is no
        screen), and so does Image.save(path), as in E2B's sandboxes."""
        Image = image_module.Image
        if getattr(Image.show, "_agent_sandbox", False):
            return
        from IPython.display import display

        original_save = Image.save

        def show(self, title=None, **options):
            display(self)

        @functools.wraps(original_save)
        def save(self, fp, format=None, **params):
            result = original_save(self, fp, format, **params)
            if isinstance(fp, str) or hasattr(fp, "__fspath__"):
                try:
                    display(self)
                except Exception:
                    report("displaying a saved image")
            return result

        show._agent_sandbox = True
        save._agent_sandbox = True
        Image.show = show
        Image.save = save

    class PatchOnImport:
        """A meta path finder that runs a patch on a module right after the
        module's code has run, so the kernel need not import matplotlib or
        PIL at start."""

        def __init__(self, patches):
            self.patches = patches
            self.busy = set()

        def find_spec(self, fullname, path=None, target=None):
            patch = self.patches.get(fullname)
            if patch is None or fullname in self.busy:
                return None
            self.busy.add(fullname)
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                self.busy.discard(fullname)
            if spec is None or not hasattr(spec.loader, "exec_module"):
                return None
            spec.loader = PatchingLoader(spec.loader, fullname, patch)
            return spec

        def invalidate_caches(self):
            pass

    class PatchingLoader:
        def __init__(self, loader, name, patch):
            self._loader, self._name, self._patch = loader, name, patch

        def create_module(self, spec):
            return self._loader.create_module(spec)

        def exec_module(self, module):
            self._loader.exec_module(module)
            try:
                self._patch(module)
            except Exception:
                report("patching " + self._name)

        def __getattr__(self, name):
            return getattr(self._loader, name)

    # ------------------------------------------------------------------
    # installation
    # ------------------------------------------------------------------

    try:
        from IPython.core.formatters import BaseFormatter
        from traitlets import ObjectName, Unicode

        class DataFormatter(BaseFormatter):
            """e2b/data: tabular data as {column: [values]}."""

            format_type = Unicode("e2b/data")
            print_method = ObjectName("_repr_e2b_data_")
            _return_type = (dict,)

        class ChartFormatter(BaseFormatter):
            """e2b/chart: a chart's description (see startup.py)."""

            format_type = Unicode("e2b/chart")
            print_method = ObjectName("_repr_e2b_chart_")
            _return_type = (dict,)

            def __call__(self, obj):
                # Not a type printer: activating the inline backend pops
                # every formatter's printer for Figure (select_figure_formats).
                figure = sys.modules.get("matplotlib.figure")
                if self.enabled and figure is not None and isinstance(obj, figure.Figure):
                    return chart_or_none(obj)
                return super().__call__(obj)

        formatters = shell.display_formatter.formatters
        data = DataFormatter(parent=shell.display_formatter)
        data.for_type_by_name("pandas.core.frame", "DataFrame", data_or_none)
        formatters["e2b/data"] = data
        formatters["e2b/chart"] = ChartFormatter(parent=shell.display_formatter)
    except Exception:
        report("registering the e2b formatters")

    try:
        shell.run_line_magic("colors", "NoColor")
    except Exception:
        report("turning traceback colours off")

    try:
        patches = {
            "matplotlib.axes._axes": record_boxplots,
            "PIL.Image": display_pil_images,
        }
        pending = {}
        for name, patch in patches.items():
            module = sys.modules.get(name)
            if module is not None:
                patch(module)
            else:
                pending[name] = patch
        if pending:
            sys.meta_path.insert(0, PatchOnImport(pending))
    except Exception:
        report("installing import patches")


try:
    _agent_sandbox_startup()
finally:
    del _agent_sandbox_startup

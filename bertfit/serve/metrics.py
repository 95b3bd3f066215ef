"""The metrics `bertfit serve` exports at TF Serving's `/monitoring/prometheus/metrics`, with
TF Serving's names and labels where TF Serving has the metric, in its text layout.

TF Serving names a TensorFlow metric `/a/b/c` as `:a:b:c` and writes `# TYPE` lines only
(`util/prometheus_exporter.cc` GetPrometheusMetricName, SerializeHistogram, SerializeScalar):
a counter's or gauge's value as a whole number, a histogram's limits and sum as doubles.
The metrics and their buckets, from tensorflow/serving at `9d981c5` and tensorflow:

- `:tensorflow:serving:request_count{model_name,status}`: requests by status code name
  (`servables/tensorflow/util.cc` RecordModelRequestCount): every REST request under `/v1/`
  (`model_servers/http_server.cc` ProcessRequest) and every gRPC Predict, Classify and Regress
  (`prediction_service_impl.cc`), failures too;
- `:tensorflow:serving:request_latency{model_name,API,entrypoint}`: microseconds, buckets
  10 * 1.8**i for 33 buckets (`util.cc` RecordRequestLatency), of the same requests when they
  succeed (API "predict", "" for a REST GET, "Predict"..., entrypoint "REST" or "GRPC");
- `:tensorflow:serving:batching_session:input_batch_size` / `processed_batch_size`: rows per
  request / per model call, buckets 2**i for 14 (`batching/batching_util.h`);
- `:tensorflow:serving:batching_session:queuing_latency{thread_pool_name}`: microseconds a
  request waited for its batch, buckets 100 * 1.2**i for 52 (`batching/batching_session.cc`);
- `:tensorflow:cc:saved_model:load_attempt_count{model_path,status}` ("success" / "fail") and
  `:tensorflow:cc:saved_model:load_latency{model_path}` (microseconds), TensorFlow's
  `cc/saved_model/loader.cc`;
- `:bertfit:serving:model_version_state{model_name,version,state}`: bertfit's own (TF Serving
  has no metric for it): 1 for each version's current state (START, LOADING, AVAILABLE,
  UNLOADING, END, as GetModelStatus reports it).
"""

from __future__ import annotations

import bisect
import dataclasses


def exponential(scale: float, growth: float, count: int) -> list[float]:
    """TensorFlow's `Buckets::Exponential`: `count` upper limits scale * growth**i (and +Inf
    after them)."""
    return [scale * growth**i for i in range(count)]


@dataclasses.dataclass
class _Histogram:
    limits: list[float]
    counts: list[int]
    total: float = 0.0


class Metric:
    """One metric family: a counter, a gauge or a histogram, with its label names."""

    def __init__(self, name: str, kind: str, labels: tuple[str, ...] = (), limits=None):
        self.name = name
        self.kind = kind
        self.labels = labels
        self.limits = limits
        self.cells: dict[tuple[str, ...], int | _Histogram] = {}

    def add(self, value: float = 1, **labels: str) -> None:
        """A counter's increment, or a histogram's observation (TensorFlow's counters hold
        whole numbers: an increment is cut to one)."""
        key = self._key(labels)
        if self.kind == "histogram":
            cell = self.cells.setdefault(key, _Histogram(self.limits, [0] * (len(self.limits) + 1)))
            cell.counts[bisect.bisect_left(self.limits, value)] += 1
            cell.total += value
        else:
            self.cells[key] = self.cells.get(key, 0) + int(value)

    def set(self, value: int, **labels: str) -> None:
        """A gauge's value (a whole number, as TensorFlow's int64 gauges hold)."""
        self.cells[self._key(labels)] = int(value)

    def remove(self, **labels: str) -> None:
        self.cells.pop(self._key(labels), None)

    def _key(self, labels: dict) -> tuple[str, ...]:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name} takes the labels {self.labels}, got {sorted(labels)}")
        return tuple(str(labels[name]) for name in self.labels)

    def lines(self) -> list[str]:
        """The family in Prometheus' text format, as TF Serving writes it."""
        lines = [f"# TYPE {self.name} {self.kind}"]
        for key, cell in sorted(self.cells.items()):
            labels = [
                f'{name}="{_escaped(value)}"' for name, value in zip(self.labels, key, strict=True)
            ]
            if not isinstance(cell, _Histogram):  # SerializeScalar: "%d"
                lines.append(f"{self.name}{{{','.join(labels)}}} {cell}")
                continue
            cumulative = 0
            for index, count in enumerate(cell.counts):
                cumulative += count
                limit = _double(cell.limits[index]) if index < len(cell.limits) else "+Inf"
                le = ",".join([*labels, f'le="{limit}"'])
                lines.append(f"{self.name}_bucket{{{le}}} {cumulative}")
            lines.append(f"{self.name}_sum{{{','.join(labels)}}} {_double(cell.total)}")
            lines.append(f"{self.name}_count{{{','.join(labels)}}} {cumulative}")
        return lines


def _escaped(value: str) -> str:
    """A label value as the text format escapes it (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _double(value: float) -> str:
    """A histogram's limit or sum as absl::StrCat writes a double: six significant digits
    (`1e+06`, `1.23457e+06`, `0.5`), as `%g` does."""
    return f"{value:.6g}"


class ServingMetrics:
    """The metrics of one `bertfit serve` process (see the module's docstring)."""

    def __init__(self):
        serving, saved_model = ":tensorflow:serving:", ":tensorflow:cc:saved_model:"
        batching = serving + "batching_session:"
        self.request_count = Metric(serving + "request_count", "counter", ("model_name", "status"))
        self.request_latency = Metric(
            serving + "request_latency",
            "histogram",
            ("model_name", "API", "entrypoint"),
            exponential(10, 1.8, 33),
        )
        self.input_batch_size = Metric(
            batching + "input_batch_size", "histogram", (), exponential(1, 2, 14)
        )
        self.processed_batch_size = Metric(
            batching + "processed_batch_size", "histogram", (), exponential(1, 2, 14)
        )
        self.queuing_latency = Metric(
            batching + "queuing_latency",
            "histogram",
            ("thread_pool_name",),
            exponential(100, 1.2, 52),
        )
        self.load_attempt_count = Metric(
            saved_model + "load_attempt_count", "counter", ("model_path", "status")
        )
        self.load_latency = Metric(saved_model + "load_latency", "counter", ("model_path",))
        self.model_state = Metric(
            ":bertfit:serving:model_version_state", "gauge", ("model_name", "version", "state")
        )

    def text(self) -> str:
        """Every family in Prometheus' text format (version 0.0.4)."""
        families = [v for v in vars(self).values() if isinstance(v, Metric)]
        return "\n".join(line for family in families for line in family.lines()) + "\n"

"""The memory estimate bounds the measured peak (VmHWM of a fresh process that loads what a worker's
training process loads) on CPU, for a few configurations of the real SmolLM2-135M: at most 20 % under,
at most 60 % over (see `test_estimate_bounds_the_measured_peak`). The probe and the configurations are
`bench.common.peak_probe`'s, which bench/memory_fit.py also measures."""

import pytest

from bench.common.peak_probe import CONFIGS, UNQUANTIZED, config_id, measure_and_estimate

pytestmark = pytest.mark.integration

#: Every configuration with the chunked LM-head loss (`TrainConfig.loss_chunk_mib`, 16 MiB by default), and
#: the unchunked head (`loss_chunk_mib` 0) on the smallest and the deepest ones and the unquantized base.
CHUNKED = [{**spec, "chunk_mib": 16} for spec in CONFIGS]
UNCHUNKED = [spec for spec in CONFIGS if spec["schedule"] in ("full", "tail")] + [UNQUANTIZED]


@pytest.mark.parametrize("spec", CHUNKED + UNCHUNKED, ids=config_id)
def test_estimate_bounds_the_measured_peak(spec):
    """The estimate may be at most 20 % under the measured peak (the dangerous side: a job routed to
    a worker too small for it) and at most 60 % over it (a job routed to a bigger worker than needed).

    It was a symmetric 25 % band on the AVX-512 machine where the coefficients were measured. On an
    AVX2 machine (NF4 computing in fp32) the same configuration's measured peak varied between runs
    (full b2x128: 1,168 and 1,518 MiB; the process baseline dominates small configurations), and
    the unquantized base's loading term over-reserves (fp32: 1,492 measured, 2,083 estimated)."""
    result = measure_and_estimate(spec)
    measured, estimated = result["peak_mib"], result["estimate"]["total_mib"]
    print(config_id(spec), "measured", round(measured), "estimated", round(estimated), result["estimate"])
    assert 0.8 * measured <= estimated <= 1.6 * measured, (measured, estimated)

"""What the end of a Keras fit costs with CrystalPerfCallback: fit wall time, the callback's job-end time and
the training process's peak RSS, with the analysis (the default: a finish process fit waits for) and
without it (analyze=False). One fit per process:

    for mode in trace analyze; do python bench/tf_finish_cost.py $mode /tmp/out-$mode; done
"""

import json
import resource
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from crystalperf.integrations.tensorflow import CrystalPerfCallback

analyze = sys.argv[1] == "analyze"
x = np.random.rand(32 * 60, 64, 64, 3).astype("float32")
y = np.random.randint(0, 10, 32 * 60)
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2)
m = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                      keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
                      keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
cb = CrystalPerfCallback(output_dir=sys.argv[2], analyze=analyze)
orig = cb._finish
spent = {}


def timed(*args: object, **kwargs: object) -> None:
    started = time.perf_counter()
    orig(*args, **kwargs)
    spent["finish"] = time.perf_counter() - started


cb._finish = timed
started = time.perf_counter()
m.fit(ds, epochs=1, callbacks=[cb], verbose=0)
total = time.perf_counter() - started
print(json.dumps({"fit": round(total, 2), "finish": round(spent.get("finish", -1), 2),
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))

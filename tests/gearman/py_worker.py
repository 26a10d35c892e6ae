"""A gearman3 worker used by the tests. Functions:
  reverse   -> sends status 1/2, a WORK_DATA chunk, then completes with the reversed data
  explode   -> raises (sent as WORK_EXCEPTION/FAIL)
  hang      -> writes its job data to the marker file given as argv[2], then hangs forever
Usage: py_worker.py HOST:PORT [MARKER]"""

import sys
import time

from gearman_py3 import gearman


def text(data):
    return data.decode() if isinstance(data, bytes) else data


class Worker(gearman.GearmanWorker):
    def on_job_exception(self, current_job, exc_info):
        self.send_job_exception(current_job, "kaboom")
        return False


def reverse(worker, job):
    worker.send_job_status(job, 1, 2)
    worker.send_job_data(job, "partial")
    return text(job.data)[::-1]


def explode(worker, job):
    raise RuntimeError("kaboom")


def hang(worker, job):
    with open(sys.argv[2], "w") as f:
        f.write(text(job.data))
    while True:
        time.sleep(1)


w = Worker([sys.argv[1]])
w.set_client_id("py-worker")
w.register_task(b"reverse", reverse)
w.register_task(b"explode", explode)
w.register_task(b"hang", hang)
w.work()

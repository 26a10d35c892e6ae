<?php
// Drives a jobyard server with Debian's php-pda-pheanstalk (Pheanstalk 4.x) and prints
// what the library returned as one JSON object; tests/test_pheanstalk.py asserts on it.
// Usage: php pheanstalk_client.php PORT [basic | produce N | consume]
declare(strict_types=1);

require_once 'Pheanstalk/autoload.php'; // Debian's autoloader, on the default include_path

use Pheanstalk\JobId;
use Pheanstalk\Pheanstalk;

if ($argc < 2) {
    fwrite(STDERR, "usage: php pheanstalk_client.php PORT\n");
    exit(2);
}
$port = (int)$argv[1];
$mode = $argv[2] ?? 'basic';
$out = [];

/** Runs $fn and records the class of what it threw, or null. */
function thrown(callable $fn): ?string
{
    try {
        $fn();
        return null;
    } catch (\Throwable $e) {
        return get_class($e);
    }
}

try {
    $p = Pheanstalk::create('127.0.0.1', $port, 10);
    if ($mode === 'produce') {
        // N jobs into 'php-persist'; of them, every fifth is deleted, the others buried or
        // released (ready).
        $n = (int)($argv[3] ?? 10);
        $p->useTube('php-persist')->watch('php-persist')->ignore('default');
        $out['put'] = [];
        $out['buried'] = [];
        $out['deleted'] = [];
        for ($i = 0; $i < $n; $i++) {
            $job = $p->put("php-$i", 100 + $i);
            $out['put'][] = [$job->getId(), "php-$i"];
        }
        foreach ($out['put'] as $k => [$id, $body]) {
            if ($k % 5 === 0) {
                $p->delete(new JobId($id));
                $out['deleted'][] = $id;
                continue;
            }
            // this job is now the most urgent ready one: the ones before it were deleted,
            // buried, or released with a less urgent priority
            $r = $p->reserveWithTimeout(5);
            if ($r === null || $r->getId() !== $id) {
                throw new \RuntimeException("expected to reserve job $id");
            }
            if ($k % 3 === 0) {
                $p->bury($r);
                $out['buried'][] = $id;
            } else {
                $p->release($r, 100000 + $k);
            }
        }
        echo json_encode($out), "\n";
        exit(0);
    }
    if ($mode === 'consume') {
        $p->useTube('php-persist')->watch('php-persist')->ignore('default');
        $out['kicked'] = $p->kick(1000);
        $out['got'] = [];
        while (($j = $p->reserveWithTimeout(0)) !== null) {
            $out['got'][] = [$j->getId(), $j->getData()];
            $p->delete($j);
        }
        echo json_encode($out), "\n";
        exit(0);
    }

    // tubes
    $p->useTube('php-tube');
    $p->watch('php-tube');
    $p->ignore('default');
    $out['used'] = $p->listTubeUsed(true);
    $out['watched'] = $p->listTubesWatched(true);

    // put, priorities, reserve, delete
    $a = $p->put('job a', 10);
    $b = $p->put('job b', 5);
    $c = $p->put('job c', 1, 100); // delayed
    $binary = "bin\r\n\0\xff\r\nend";
    $d = $p->put($binary, 2000);
    $out['ids'] = [$a->getId(), $b->getId(), $c->getId(), $d->getId()];
    $out['put_c_state'] = $p->statsJob($c)['state'];

    $first = $p->reserveWithTimeout(5);
    $out['first_reserved'] = [$first->getId(), $first->getData()];
    $out['first_state'] = $p->statsJob($first)['state'];
    $p->delete($first);
    $out['deleted_then_peek'] = thrown(function () use ($p, $first) { $p->peek($first); });

    // release with delay
    $second = $p->reserveWithTimeout(5);
    $out['second_reserved'] = [$second->getId(), $second->getData()];
    $p->touch($second);
    $p->release($second, 20, 2);
    $s = $p->statsJob($second);
    $out['released'] = ['state' => $s['state'], 'pri' => (int)$s['pri'], 'releases' => (int)$s['releases']];

    // binary body
    $bin = $p->reserveWithTimeout(5);
    $out['binary_ok'] = ($bin->getId() === $d->getId() && $bin->getData() === $binary);
    $p->delete($bin);

    $out['empty_reserve'] = $p->reserveWithTimeout(0) === null; // a and c are delayed
    $again = $p->reserveWithTimeout(20); // a is ready again after ~2 s
    $out['after_delay'] = $again === null ? null : $again->getId();

    // bury and kick
    $p->bury($again, 7);
    $s = $p->statsJob($again);
    $out['buried'] = ['state' => $s['state'], 'pri' => (int)$s['pri']];
    $pb = $p->peekBuried();
    $out['peek_buried'] = $pb === null ? null : $pb->getId();
    $out['peek_delayed'] = $p->peekDelayed()->getId();
    $out['peek_ready_none'] = $p->peekReady() === null;
    $out['kicked'] = $p->kick(10);
    $out['kicked_state'] = $p->statsJob($again)['state'];
    $p->kickJob($c);
    $out['kick_job_state'] = $p->statsJob($c)['state'];
    $out['peek_ready'] = $p->peekReady()->getId();

    // stats
    $st = $p->stats();
    $out['stats'] = [
        'current-jobs-ready' => (int)$st['current-jobs-ready'],
        'cmd-put' => (int)$st['cmd-put'],
        'max-job-size' => (int)$st['max-job-size'],
        'has-version' => isset($st['version']),
    ];
    $ts = $p->statsTube('php-tube');
    $out['stats_tube'] = [
        'name' => $ts['name'],
        'current-jobs-ready' => (int)$ts['current-jobs-ready'],
        'total-jobs' => (int)$ts['total-jobs'],
    ];
    $out['tubes'] = $p->listTubes();

    // errors mapped to the library's exceptions
    $out['delete_missing'] = thrown(function () use ($p) { $p->delete(new JobId(987654321)); });
    $out['too_big'] = thrown(function () use ($p) { $p->put(str_repeat('x', 65536)); });
    $out['after_too_big'] = $p->put('still in sync')->getId();
    $out['stats_job_missing'] = thrown(function () use ($p) { $p->statsJob(new JobId(987654321)); });

    // drain what is left
    $drained = 0;
    while (($j = $p->reserveWithTimeout(0)) !== null) {
        $p->delete($j);
        $drained++;
    }
    $out['drained'] = $drained;
    $out['final_ready'] = (int)$p->statsTube('php-tube')['current-jobs-ready'];
} catch (\Throwable $e) {
    $out['fatal'] = get_class($e) . ': ' . $e->getMessage() . ' at ' . $e->getFile() . ':' . $e->getLine();
    echo json_encode($out, JSON_PARTIAL_OUTPUT_ON_ERROR), "\n";
    exit(1);
}
echo json_encode($out, JSON_PARTIAL_OUTPUT_ON_ERROR), "\n";

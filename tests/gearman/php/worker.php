<?php
// php-gearman worker used by test_php.py: php_reverse (with status and data), php_fail.
$w = new GearmanWorker();
$w->addServer('127.0.0.1', (int)$argv[1]);
$w->addFunction('php_reverse', function (GearmanJob $job) {
    $job->sendStatus(1, 2);
    $job->sendData('chunk');
    return strrev($job->workload());
});
$w->addFunction('php_fail', function (GearmanJob $job) {
    $job->sendFail();
    return '';
});
$n = (int)$argv[2];
for ($i = 0; $i < $n; $i++) {
    if (!$w->work()) {
        fwrite(STDERR, "work failed: " . $w->returnCode() . "\n");
        exit(1);
    }
}

<?php
// php-gearman client used by test_php.py. Prints one line per check, as KEY=VALUE.
$c = new GearmanClient();
$c->addServer('127.0.0.1', (int)$argv[1]);
$c->setTimeout(60000);
$r = $c->doNormal('php_reverse', 'gearman');
echo "normal=", $r, " rc=", $c->returnCode(), "\n";
$r = $c->doHigh('php_reverse', 'high');
echo "high=", $r, "\n";
$r = $c->doLow('php_reverse', 'low');
echo "low=", $r, "\n";
$h = $c->doBackground('php_bg', 'bgdata', 'php-unique-1');
$h2 = $c->doBackground('php_bg', 'other', 'php-unique-1');
echo "coalesced=", ($h === $h2 ? 'yes' : 'no'), "\n";
$st = $c->jobStatus($h);
echo "status=", json_encode($st), "\n";
$r = @$c->doNormal('php_fail', 'x');
echo "fail_rc=", $c->returnCode() == GEARMAN_WORK_FAIL ? 'WORK_FAIL' : $c->returnCode(), "\n";

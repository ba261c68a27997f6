/* Every panel refreshed now and every 2 s. */
"use strict";
function tick() {
  task("sharings", refreshSharings);
  task("machines", refreshMachines);
  task("plan", refreshPlan);
  task("alerts", refreshAlerts);
  task("report", refreshReport);
}
tick();
setInterval(tick, 2000);

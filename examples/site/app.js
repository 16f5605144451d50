document.getElementById("script-status").textContent = "The script ran.";
